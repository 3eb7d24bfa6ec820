//! The Nexmark queries of `bench/nexmark/` on a real cluster give Flink's results, row for row, over the same
//! stream (`bench/nexmark/expected/`), all but q6: Flink refuses q6's SQL, so its result is checked against a
//! reference computed from the generator (`reference_q6`) under Weir's reading of q6, the original Nexmark
//! definition (the average of each seller's last 10 closed auctions, in the order they closed), which is not the
//! Flink port's SQL text (eleven rows ordered by the winning bid's time; see `bench/nexmark/q6.yaml`). Every
//! query once, then every query that keeps state through a task manager SIGKILLed mid-run and through a stop
//! with savepoint and a restore at another parallelism.

use anyhow::Context;
use std::time::Duration;
use weir_integration_tests::nexmark::{check_result, QueryRun, QUERIES};
use weir_integration_tests::{Cluster, ClusterOptions, JobState};

/// Every query's result over the same stream: Flink's, row for row; q6's, the generator-computed reference.
#[test]
fn every_query_gives_flinks_result_and_q6_its_reference() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(2, 4))?;
    let mut jobs = Vec::new();
    for q in QUERIES {
        let out = cluster.output_dir(q)?;
        let mut run = QueryRun::new(q);
        run.output = Some(out.clone());
        run.checkpoint_ms = 500;
        jobs.push((q, cluster.submit_spec(run.spec()?)?, out));
    }
    for (q, id, out) in jobs {
        cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(180)).with_context(|| q.to_string())?;
        check_result(q, &out)?;
    }
    cluster.stop();
    Ok(())
}

/// q3: a join, rows of both sides in state; q4: a join and two aggregations with updates; q8: a window join.
#[test]
fn joins_hold_through_a_kill_and_a_rescale() -> anyhow::Result<()> {
    through_a_kill_and_a_rescale(&["q3", "q4", "q8"])
}

/// q5: sliding windows, then a top-1 per window; q6: timers, rows waiting for the watermark and a frame per
/// seller; q7: tumbling windows joined back; q11: session windows.
#[test]
fn windows_hold_through_a_kill_and_a_rescale() -> anyhow::Result<()> {
    through_a_kill_and_a_rescale(&["q5", "q6", "q7", "q11"])
}

fn through_a_kill_and_a_rescale(queries: &[&str]) -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(2, 4))?;
    for &q in queries {
        // A task manager killed mid-run: the restored job's committed output is the same.
        let out = cluster.output_dir(&format!("{q}-kill"))?;
        let mut run = QueryRun::new(q);
        (run.output, run.checkpoint_ms, run.rate_per_sec) = (Some(out.clone()), 200, 40_000);
        let id = cluster.submit_spec(run.spec()?)?;
        cluster.finish_through_a_kill(&id, 3).with_context(|| q.to_string())?;
        check_result(q, &out).context("after a task manager kill")?;

        // Stopped with a savepoint at parallelism 2, restored at 3: the source's two splits dealt to three
        // subtasks, keyed state and timers moved by key group.
        let out = cluster.output_dir(&format!("{q}-rescale"))?;
        let mut run = QueryRun::new(q);
        (run.output, run.checkpoint_ms, run.rate_per_sec) = (Some(out.clone()), 200, 40_000);
        let id = cluster.submit_spec(run.spec()?)?;
        cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
        cluster.wait_for_checkpoints(&id, 2, Duration::from_secs(60))?;
        let savepoint = cluster.stop_with_savepoint(&id, false, "native")?;
        run.parallelism = 3;
        run.splits = Some(2);
        run.rate_per_sec = 0;
        let id = cluster.submit_spec_from(run.spec()?, &savepoint, "no-claim", false)?;
        cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(180))?;
        check_result(q, &out).context("after a rescale from 2 to 3")?;
    }
    cluster.stop();
    Ok(())
}

#[test]
fn q6_reference_is_not_trivial() {
    // The computed expectation must say something: many sellers, averages over more than one auction.
    let rows = weir_integration_tests::nexmark::reference_q6(200_000, 2_000);
    let sellers: std::collections::HashSet<&str> = rows.iter().filter_map(|r| r.split(',').next()).collect();
    assert!(rows.len() > 1000 && sellers.len() > 100, "{} rows, {} sellers", rows.len(), sellers.len());
}

/// `interval-join` on the Nexmark stream (bids from 1 s before their auction to 3 s after it, of at least 1000
/// cents) against a brute-force join over the generator's events: every pair once, through a checkpointed run.
/// A pair is found by whichever row comes second, mostly the auction (its batches fill slowly and linger), so the
/// join runs both ways round — auctions first, then bids first with the bounds mirrored — to probe from each side.
#[test]
fn interval_join_matches_a_brute_force_join() -> anyhow::Result<()> {
    use weir_taskmanager::builtins::nexmark::generator::{Event, EventKind, Generator};
    let (events, tps) = (200_000u64, 2_000u64);
    let mut g = Generator::new(tps);
    let mut e = Event::default();
    let mut auctions: std::collections::HashMap<i64, i64> = std::collections::HashMap::new();
    let mut bids = Vec::new();
    for n in 0..events {
        g.event(n, &mut e);
        match e.kind {
            EventKind::Auction => drop(auctions.insert(e.auction.id, e.date_time)),
            EventKind::Bid => bids.push((e.bid.auction, e.bid.price, e.bid.bidder, e.date_time)),
            EventKind::Person => {}
        }
    }
    let mut early = 0;
    let mut want: Vec<String> = bids
        .iter()
        .filter_map(|&(auction, price, bidder, t)| {
            let lag = t - auctions.get(&auction)?;
            early += usize::from((-1000..0).contains(&lag) && price >= 1000);
            ((-1000..=3000).contains(&lag) && price >= 1000).then(|| format!("{auction},{price},{bidder}"))
        })
        .collect();
    want.sort_unstable();
    anyhow::ensure!(
        want.len() > 1000 && early > 0,
        "a weak test: {} pairs, {early} bids before their auction",
        want.len()
    );

    let mut cluster = Cluster::start(ClusterOptions::new(1, 4))?;
    for (inputs, lower, upper) in [("auctions, bids", -1000, 3000), ("bids, auctions", -3000, 1000)] {
        let out = cluster.output_dir(&format!("interval-join-{lower}"))?;
        let text = format!(
            r#"
name: interval-join
parallelism: 2
state_backend: rocksdb
checkpointing: {{ interval_ms: 300, incremental: true }}
operators:
  - uid: events
    kind: nexmark
    config: {{ events: {events}, tps: {tps}, splits: 2, block: 0 }}
    watermarks: {{ max_out_of_orderness_ms: 3999 }}
  - uid: auctions
    kind: project
    input: events
    config: {{ where: event_type = 1, select: "auction_id AS auction", key: auction_id }}
  - uid: bids
    kind: project
    input: events
    config: {{ where: event_type = 2, select: "bid_price AS price, bid_bidder AS bidder", key: bid_auction }}
  - uid: near
    kind: interval-join
    inputs: [{inputs}]
    config: {{ lower_ms: {lower}, upper_ms: {upper}, where: "price >= 1000", select: "auction, price, bidder" }}
  - {{ uid: sink, kind: file-sink, input: near, config: {{ path: "{}" }} }}
"#,
            out.display()
        );
        let id = cluster.submit_spec(weir_common::job::spec::parse_spec_text(&text)?)?;
        cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(180))?;
        let got = weir_integration_tests::nexmark::committed_rows(&out)?;
        if got != want {
            let missing: Vec<&String> = want.iter().filter(|r| got.binary_search(r).is_err()).take(5).collect();
            let extra: Vec<&String> = got.iter().filter(|r| want.binary_search(r).is_err()).take(5).collect();
            anyhow::bail!(
                "inputs [{inputs}]: {} rows, {} expected; missing {missing:?}; not expected {extra:?}",
                got.len(),
                want.len()
            );
        }
    }
    cluster.stop();
    Ok(())
}
