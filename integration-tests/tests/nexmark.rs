//! The `nexmark` source on a real cluster: its events, written by an exactly-once `file-sink` as JSON lines and
//! read back, are the generator's stream (`GENERATOR.md`) — every event exactly once, field for field — through a
//! task manager SIGKILLed mid-run.

use anyhow::Context;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use weir_integration_tests::{Cluster, ClusterOptions, JobState};
use weir_taskmanager::builtins::nexmark::generator::{Event, Generator, DEFAULT_TPS};

const EVENTS: u64 = 30_000;

/// An event's canonical line (§7) without its number, from a JSON row of the sink.
fn line_of(row: &serde_json::Value) -> anyhow::Result<String> {
    let int = |name: &str| row.get(name).and_then(|v| v.as_i64()).with_context(|| format!("{name} in {row}"));
    let s = |name: &str| {
        row.get(name).and_then(|v| v.as_str()).map(str::to_string).with_context(|| format!("{name} in {row}"))
    };
    let t = int("date_time")?;
    Ok(match int("event_type")? {
        0 => format!(
            "P|{t}|{}|{}|{}|{}|{}|{}|{}",
            int("person_id")?,
            s("person_name")?,
            s("person_email_address")?,
            s("person_credit_card")?,
            s("person_city")?,
            s("person_state")?,
            s("person_extra")?
        ),
        1 => format!(
            "A|{t}|{}|{}|{}|{}|{}|{}|{}|{}|{}",
            int("auction_id")?,
            s("auction_item_name")?,
            s("auction_description")?,
            int("auction_initial_bid")?,
            int("auction_reserve")?,
            int("auction_expires")?,
            int("auction_seller")?,
            int("auction_category")?,
            s("auction_extra")?
        ),
        _ => format!(
            "B|{t}|{}|{}|{}|{}|{}|{}",
            int("bid_auction")?,
            int("bid_bidder")?,
            int("bid_price")?,
            s("bid_channel")?,
            s("bid_url")?,
            s("bid_extra")?
        ),
    })
}

/// How many times each line was written, over the committed files of `dir`.
fn written(dir: &Path) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        for l in std::fs::read_to_string(e.path())?.lines() {
            *out.entry(line_of(&serde_json::from_str(l)?)?).or_insert(0) += 1;
        }
    }
    Ok(out)
}

#[test]
fn the_nexmark_source_emits_the_generators_stream_exactly_once_through_a_taskmanager_kill() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(2, 4))?;
    let out = cluster.output_dir("events")?;
    let yaml = format!(
        "name: nexmark-source\nparallelism: 2\ncheckpointing: {{ interval_ms: 200 }}\noperators:\n  \
         - {{ uid: events, kind: nexmark, config: {{ events: {EVENTS}, splits: 8, rate_per_sec: 6000 }} }}\n  \
         - {{ uid: out, kind: file-sink, input: events, parallelism: 1, config: {{ path: {:?}, format: json }} }}\n",
        out.display().to_string()
    );
    let id = cluster.submit(&yaml)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    cluster.wait_for_checkpoints(&id, 3, Duration::from_secs(60))?;
    let busy = cluster.busy_taskmanagers()?;
    let victim = *busy.first().context("no busy task manager")?;
    cluster.kill_taskmanager(victim)?;
    cluster.start_taskmanager()?;
    let done = cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(120))?;
    anyhow::ensure!(done.restarts >= 1, "the kill did not restart the job: {done:?}");
    let got = written(&out)?;
    let (mut g, mut e) = (Generator::new(DEFAULT_TPS), Event::default());
    let mut want = BTreeMap::new();
    for n in 0..EVENTS {
        g.event(n, &mut e);
        let mut s = String::new();
        e.write_canonical(&mut s);
        let line = s.split_once('|').map(|(_, rest)| rest.to_string()).context("a canonical line")?;
        *want.entry(line).or_insert(0u64) += 1;
    }
    let missing = want.iter().filter(|(l, n)| got.get(*l) != Some(n)).count();
    let extra = got.iter().filter(|(l, _)| !want.contains_key(*l)).count();
    anyhow::ensure!(missing == 0 && extra == 0, "{missing} events missing or repeated, {extra} not in the stream");
    cluster.stop();
    Ok(())
}
