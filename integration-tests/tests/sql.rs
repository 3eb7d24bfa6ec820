//! Flink SQL scripts on Weir: the Nexmark texts Flink's side runs (`bench/nexmark/sql/`) submitted with `weir job
//! submit FILE.sql` give Flink's results, row for row; `weir sql explain` prints the operators a script plans
//! into; and a script that cannot run is refused by the CLI before anything reaches the cluster, saying where
//! and what — while the jobs already running are untouched. SQL jobs keep their results through a task manager
//! kill and a rescale from a savepoint, and their state across edits of their query that leave it as it was.

use anyhow::{ensure, Context};
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use weir_integration_tests::nexmark::{
    check_result, committed_rows, reference_recent_counts, reference_top_prices, QueryRun, EXPECTED_STREAM,
    RECENT_COUNTS_SQL, SQL_QUERIES, TOP_PRICES_SQL,
};
use weir_integration_tests::process::run_with_timeout;
use weir_integration_tests::{binary, Cluster, ClusterOptions, CommandOutput, JobState};

/// `weir ARGS` without a cluster.
fn weir(args: &[&str]) -> anyhow::Result<CommandOutput> {
    let mut cmd = Command::new(binary("weir")?);
    cmd.args(args);
    run_with_timeout(cmd, Duration::from_secs(60))
}

fn write(dir: &Path, name: &str, text: &str) -> anyhow::Result<String> {
    let path = dir.join(name);
    std::fs::write(&path, text)?;
    Ok(path.display().to_string())
}

/// q0–q5, q7, q8 and q11 (joins, tumbling, sliding and session windows, updating aggregates) as Flink's side writes
/// them, submitted as SQL, commit Flink's rows, and an OVER aggregate and a window Top-N the generator's reference; a bad script submitted
/// meanwhile is refused (exit 2, naming its line) and the running jobs finish with their results unchanged.
#[test]
fn nexmark_sql_texts_give_flinks_results() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(2, 4))?;
    let mut jobs = Vec::new();
    for q in SQL_QUERIES {
        let out = cluster.output_dir(&format!("sql-{q}"))?;
        let mut run = QueryRun::new(q);
        run.output = Some(out.clone());
        run.checkpoint_ms = 500;
        let file = write(cluster.dir(), &format!("{q}.sql"), &run.sql()?)?;
        let submitted = cluster.cli_json(&["job", "submit", &file])?;
        let id = submitted["id"].as_str().context("no id")?.to_string();
        jobs.push((q, id, out));
    }
    // An OVER aggregate over a window aggregate's rows and a window Top-N, against results computed from the
    // generator.
    type Reference = fn(u64, u64) -> Vec<String>;
    let computed: [(&str, &str, Reference); 2] =
        [("over", RECENT_COUNTS_SQL, reference_recent_counts), ("top-n", TOP_PRICES_SQL, reference_top_prices)];
    let mut references = Vec::new();
    for (name, sql, reference) in computed {
        let out = cluster.output_dir(&format!("sql-{name}"))?;
        let mut run = QueryRun::new("q0");
        run.output = Some(out.clone());
        run.checkpoint_ms = 500;
        let file = write(cluster.dir(), &format!("{name}.sql"), &run.sql_of(sql)?)?;
        let id = cluster.cli_json(&["job", "submit", &file])?["id"].as_str().context("no id")?.to_string();
        references.push((name, id, out, reference));
    }
    let bad = write(
        cluster.dir(),
        "bad.sql",
        "CREATE TABLE s (a INT) WITH ('connector' = 'blackhole');\nINSERT INTO s SELECT nope FROM s;",
    )?;
    let refused = cluster.cli(&["job", "submit", &bad])?;
    ensure!(refused.status.code() == Some(2), "a bad script must exit 2: {refused}");
    ensure!(refused.stderr.contains("line 2") && refused.stderr.contains("nope"), "{refused}");
    for (q, id, out) in jobs {
        cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(180)).with_context(|| q.to_string())?;
        check_result(q, &out)?;
    }
    let (events, tps, _) = EXPECTED_STREAM;
    for (name, id, out, reference) in references {
        cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(180)).context(name)?;
        let want = reference(events, tps);
        let got = committed_rows(&out)?;
        ensure!(
            !want.is_empty() && got == want,
            "{name}: {} rows, want {}; first {:?}, want {:?}",
            got.len(),
            want.len(),
            got.first(),
            want.first()
        );
    }
    cluster.stop();
    Ok(())
}

/// `weir sql explain` prints each operator with its kind and input, and the planned expressions.
#[test]
fn sql_explain_prints_the_operator_graph() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut run = QueryRun::new("q2");
    run.parallelism = 3;
    let file = write(dir.path(), "q2.sql", &run.sql()?)?;
    let out = weir(&["sql", "explain", &file])?;
    ensure!(out.status.success(), "{out}");
    for line in [
        "job q2, parallelism 3",
        "datagen [nexmark]",
        "watermarks: bounded out-of-orderness 3999 ms",
        "nexmark_q2.select [project] <- datagen",
        "nexmark_q2.sink [blackhole] <- nexmark_q2.select",
        "bid_auction % 123",
    ] {
        ensure!(out.stdout.contains(line), "no {line:?} in:\n{}", out.stdout);
    }
    // A window's config on one line; q5's counts ranked in their windows.
    let q5 = write(dir.path(), "q5.sql", &QueryRun::new("q5").sql()?)?;
    let out = weir(&["sql", "explain", &q5])?;
    ensure!(out.status.success(), "{out}");
    for line in ["window: { sliding_ms: 10000, slide_ms: 2000 }", "nexmark_q5.top [window-top] <- nexmark_q5.top-input"]
    {
        ensure!(out.stdout.contains(line), "no {line:?} in:\n{}", out.stdout);
    }
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/nexmark-q1.sql");
    let example = weir(&["sql", "explain", &shipped.display().to_string()])?;
    ensure!(example.status.success() && example.stdout.contains("job nexmark-q1"), "{example}");
    let json = weir(&["sql", "explain", &file, "--output", "json", "-p", "2"])?;
    ensure!(json.status.success(), "{json}");
    let spec: serde_json::Value = serde_json::from_str(&json.stdout)?;
    ensure!(spec["parallelism"] == 2 && spec["operators"].as_array().is_some_and(|o| o.len() == 3), "{spec}");
    Ok(())
}

/// Scripts that cannot run, each refused by `weir sql explain` with exit 2 and a message that says what is
/// wrong (and where, when it is a place in the text). Never a panic, never a plan.
#[test]
fn bad_sql_is_refused_with_what_and_where() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let table = "CREATE TABLE t (a INT, b VARCHAR, ts TIMESTAMP(3)) WITH ('connector' = 'nexmark');\n";
    let sink = "CREATE TABLE s (a INT) WITH ('connector' = 'blackhole');\n";
    let nexmark =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/nexmark/sql/source.sql"))?
            .replace("${EVENTS}", "10")
            .replace("${TPS}", "10")
            .replace("${BLOCK}", "0");
    let deep = format!("{sink}{nexmark};INSERT INTO s SELECT {}1{} FROM datagen", "(".repeat(3000), ")".repeat(3000));
    let long_chain =
        format!("{sink}{nexmark};INSERT INTO s SELECT {} FROM datagen", vec!["event_type"; 1000].join(" + "));
    let longer_chain =
        format!("{sink}{nexmark};INSERT INTO s SELECT {} FROM datagen", vec!["event_type"; 5000].join(" + "));
    let cases: Vec<(String, &str)> = vec![
        ("".into(), "no INSERT INTO"),
        ("SELECT 1".into(), "line 1, column 1"),
        (format!("{sink}INSERT INTO s SELEC a FROM s"), "Line: 2"),
        (format!("{sink}INSERT INTO s SELECT a FROM nowhere"), "nowhere"),
        (format!("{sink}{nexmark};INSERT INTO s SELECT nope FROM datagen"), "nope"),
        (format!("{sink}{nexmark};INSERT INTO s SELECT no_such_fn(event_type) FROM datagen"), "no_such_fn"),
        (format!("{sink}{nexmark};INSERT INTO s SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM datagen GROUP BY event_type)"), "MAX(…) over an updating table"),
        (format!("{sink}{nexmark};INSERT INTO s SELECT SUM(event_type) OVER (ORDER BY `dateTime`) FROM datagen WHERE event_type = 2"), "OVER (RANGE BETWEEN"),
        (format!("{sink}{nexmark};INSERT INTO s SELECT ROW_NUMBER() OVER (ORDER BY `dateTime`) FROM datagen"), "ROW_NUMBER() OVER (…) is not supported yet"),
        (format!("{sink}{nexmark};INSERT INTO s SELECT COUNT(*) FROM TABLE(CUMULATE(TABLE datagen, DESCRIPTOR(`dateTime`), INTERVAL '1' SECOND, INTERVAL '4' SECOND)) GROUP BY window_start, window_end"), "CUMULATE windows are not supported yet"),
        (format!("{sink}{nexmark};INSERT INTO s SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE datagen, DESCRIPTOR(event_type), INTERVAL '1' SECOND)) GROUP BY window_start, window_end"), "not a time attribute"),
        (format!("{sink}{nexmark};INSERT INTO s SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE datagen, DESCRIPTOR(`dateTime`), INTERVAL '1' SECOND)) GROUP BY window_start"), "groups by window_start and window_end"),
        (format!("{sink}{nexmark};INSERT INTO s SELECT COUNT(*) FROM TABLE(HOP(TABLE datagen, DESCRIPTOR(`dateTime`), INTERVAL '1' SECOND)) GROUP BY window_start, window_end"), "Weir reads HOP(TABLE t"),
        (format!("{sink}{nexmark};INSERT INTO s SELECT event_type FROM datagen ORDER BY event_type"), "ORDER BY is not supported yet"),
        (format!("{sink}{nexmark};INSERT INTO s SELECT event_type FROM datagen LIMIT 3"), "LIMIT is not supported yet"),
        (format!("{sink}{nexmark};INSERT INTO s SELECT d1.event_type FROM datagen d1 LEFT JOIN datagen d2 ON d1.event_type = d2.event_type"), "LEFT joins are not supported yet"),
        (format!("{sink}{nexmark};INSERT INTO s SELECT d1.event_type FROM datagen d1 JOIN datagen d2 ON d1.event_type > d2.event_type"), "without an equality"),
        (format!("{sink}CREATE TABLE t (event_type BIGINT) WITH ('connector' = 'nexmark');\nINSERT INTO s SELECT 1 FROM t"), "event_type is an INT"),
        (format!("{sink}{table}INSERT INTO s SELECT a FROM t"), "no column \"a\""),
        (format!("{sink}CREATE TABLE t (a INT) WITH ('connector' = 'kafka');\nINSERT INTO s SELECT a FROM t"), "'kafka' connector is not supported yet"),
        (format!("{sink}CREATE TABLE t (a INT) WITH ('connector' = 'nosuch');\nINSERT INTO s SELECT a FROM t"), "no connector 'nosuch'"),
        (format!("{sink}CREATE TABLE t (a INT);\nINSERT INTO s SELECT a FROM t"), "WITH ('connector'"),
        (format!("{sink}{nexmark};INSERT INTO s SELECT event_type FROM datagen WHERE person IS NOT NULL"), "read whole"),
        (format!("{sink}{nexmark};INSERT INTO s SELECT a FROM s"), "is a sink"),
        (format!("{sink}{nexmark};INSERT INTO datagen SELECT * FROM datagen"), "cannot be written to"),
        (format!("SET 'parallelism.default' = 'two';\n{sink}"), "whole number"),
        (format!("SET 'no.such.setting' = '1';\n{sink}"), "no.such.setting"),
        (format!("{sink}{sink}"), "created twice"),
        (format!("{sink}INSERT INTO s SELECT 1 FROM s;\nINSERT INTO s SELECT 1 FROM s"), "one INSERT INTO"),
        (format!("{sink}CREATE TABLE t (event_type INT, ts AS CAST(NULL AS TIMESTAMP(3)), WATERMARK FOR ts AS ts * 2) WITH ('connector' = 'nexmark');\nINSERT INTO s SELECT 1 FROM t"), "WATERMARK FOR ts"),
        (format!("{sink}CREATE TABLE t (bid ROW<x BIGINT>) WITH ('connector' = 'nexmark');\nINSERT INTO s SELECT 1 FROM t"), "bid.x is not a field"),
        (format!("{sink}{nexmark};INSERT INTO s SELECT event_type FROM datagen WHERE 'x' + 1 > 0"), "line"),
        (format!("{sink}CREATE TABLE t (a INT) WITH ('connector' = 'filesystem', 'path' = '/x', 'format' = 'orc');\nINSERT INTO t SELECT a FROM s"), "orc"),
        ("CREATE TABLE t (a INT) WITH ('connector' = 'blackhole'".into(), "never closed"),
        ("INSERT INTO s SELECT 'unterminated FROM s".into(), "Unterminated"),
        (deep, "levels deep"),
        (long_chain, "at most 256"),
        (longer_chain, "a statement of 4999 operators"),
    ];
    ensure!(cases.len() >= 20);
    let mut wrong = Vec::new();
    for (i, (text, want)) in cases.iter().enumerate() {
        let file = write(dir.path(), &format!("bad{i}.sql"), text)?;
        let out = weir(&["sql", "explain", &file])?;
        if out.status.code() != Some(2) || !out.stderr.contains(want) || out.stderr.contains("panicked") {
            wrong.push(format!("case {i} (want exit 2 and {want:?}): {}", out.stderr.trim()));
        }
    }
    ensure!(wrong.is_empty(), "{}", wrong.join("\n"));
    Ok(())
}

/// Submits `file` and takes a savepoint once the job runs: the job's id and the savepoint's URL.
fn savepoint_of_running(cluster: &mut Cluster, file: &str) -> anyhow::Result<(String, String)> {
    let submitted = cluster.cli_json(&["job", "submit", file])?;
    let id = submitted["id"].as_str().context("no id")?.to_string();
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(60))?;
    let savepoint = cluster.cli_json(&["savepoint", "trigger", &id])?;
    let url = savepoint["savepoint"].as_str().context("no savepoint url")?.to_string();
    Ok((id, url))
}

/// `weir savepoint check URL FILE --output json`: whether the restore would be accepted, and the verdicts.
fn savepoint_check(cluster: &Cluster, url: &str, file: &str) -> anyhow::Result<(bool, serde_json::Value)> {
    let out = cluster.cli(&["savepoint", "check", url, file, "--output", "json"])?;
    let v: serde_json::Value = serde_json::from_str(&out.stdout).with_context(|| format!("{out}"))?;
    Ok((out.status.success(), v))
}

/// Operator `uid`'s verdict and reason in `weir savepoint check`'s JSON (empty where it is not listed).
fn verdict(v: &serde_json::Value, uid: &str) -> (String, String) {
    let op = v["operators"].as_array().and_then(|o| o.iter().find(|o| o["uid"] == uid));
    let field = |f: &str| op.and_then(|o| o[f].as_str()).unwrap_or_default().to_string();
    (field("verdict"), field("reason"))
}

/// `weir savepoint check URL FILE.sql` judges a savepoint of a running SQL job against a script: the same
/// script and one with a column added to the projection restore the source's splits; a script reading another
/// table of the same shape finds no state for it (NEW) and drops the old source's (DROPPED, refused).
#[test]
fn savepoint_check_reads_sql_scripts() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(1, 2))?;
    // Long enough to be running at the savepoint: 100M events at 2,000 a second.
    let mut run = QueryRun::new("q2");
    run.rate_per_sec = 2_000;
    run.events = 100_000_000;
    let script = run.sql()?;
    let file = write(cluster.dir(), "q2.sql", &script)?;
    let (id, url) = savepoint_of_running(&mut cluster, &file)?;
    let verdicts = |file: &str| savepoint_check(&cluster, &url, file);
    let (ok, same) = verdicts(&file)?;
    ensure!(ok && verdict(&same, "datagen").0 == "RESTORED", "{same}");
    let wider = write(
        cluster.dir(),
        "q2-wider.sql",
        &script
            .replace("auction BIGINT,\n    price BIGINT", "auction BIGINT,\n    price BIGINT,\n    bidder BIGINT")
            .replace("SELECT auction, price\nFROM bid", "SELECT auction, price, bidder\nFROM bid"),
    )?;
    let (ok, wider_v) = verdicts(&wider)?;
    ensure!(ok && verdict(&wider_v, "datagen").0 == "RESTORED", "{wider_v}");
    let renamed = write(cluster.dir(), "q2-renamed.sql", &script.replace("datagen", "events"))?;
    let (ok, renamed_v) = verdicts(&renamed)?;
    ensure!(!ok && verdict(&renamed_v, "datagen").0 == "DROPPED", "{renamed_v}");
    cluster.cancel(&id)?;
    cluster.stop();
    Ok(())
}

/// A query's state across edits of its text: `weir savepoint check` of a savepoint of a running SQL job (a window
/// aggregate, and an unbounded `GROUP BY` over its rows) against edited scripts. A column added to the projection
/// and a changed filter keep every stateful operator's state (RESTORED, and the wider script restores and runs);
/// an aggregate added to the `GROUP BY` names that operator and the change, and so does a changed window size —
/// each refused, the other operators still RESTORED.
#[test]
fn savepoint_check_names_the_operators_a_query_edit_changes() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(1, 2))?;
    let mut run = QueryRun::new("q0");
    run.rate_per_sec = 2_000;
    run.events = 100_000_000;
    let query = |window_s: u32, min_price: u32, select: &str, columns: &str| {
        format!(
            "CREATE TABLE counts (auction BIGINT, {columns}) WITH (${{SINK}});\n\
             INSERT INTO counts\n\
             SELECT auction, {select}\n\
             FROM (\n\
               SELECT auction, COUNT(*) AS c, window_start, window_end\n\
               FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '{window_s}' SECOND))\n\
               WHERE price > {min_price}\n\
               GROUP BY auction, window_start, window_end\n\
             )\n\
             GROUP BY auction;\n"
        )
    };
    let dir = cluster.dir().to_path_buf();
    let script = |name: &str, text: String| -> anyhow::Result<String> { write(&dir, name, &run.sql_of(&text)?) };
    let file = script("counts.sql", query(10, 10, "SUM(c)", "total BIGINT"))?;
    let (id, url) = savepoint_of_running(&mut cluster, &file)?;
    let check = |file: &str| savepoint_check(&cluster, &url, file);
    let stateful = ["datagen", "counts.window", "counts.group"];
    let restored = |v: &serde_json::Value| stateful.iter().all(|uid| verdict(v, uid).0 == "RESTORED");
    let (ok, same) = check(&file)?;
    ensure!(ok && restored(&same), "the same script: {same}");
    let wider = script("wider.sql", query(10, 10, "SUM(c), MOD(auction, 10)", "total BIGINT, bucket BIGINT"))?;
    let (ok, v) = check(&wider)?;
    ensure!(ok && restored(&v), "a column added: {v}");
    let filtered = script("filtered.sql", query(10, 20, "SUM(c)", "total BIGINT"))?;
    let (ok, v) = check(&filtered)?;
    ensure!(ok && restored(&v), "the filter changed: {v}");
    let more = script("more.sql", query(10, 10, "SUM(c), MAX(c)", "total BIGINT, most BIGINT"))?;
    let (ok, v) = check(&more)?;
    let (group, why) = verdict(&v, "counts.group");
    ensure!(!ok && group == "DROPPED" && why.contains("aggregates changed from"), "an aggregate added: {v}");
    ensure!(verdict(&v, "counts.window").0 == "RESTORED", "an aggregate added, the window's state: {v}");
    let longer = script("longer.sql", query(20, 10, "SUM(c)", "total BIGINT"))?;
    let (ok, v) = check(&longer)?;
    let (window, why) = verdict(&v, "counts.window");
    ensure!(!ok && window == "DROPPED" && why.contains("window changed from"), "the window's size changed: {v}");
    // The wider script restores from the savepoint and runs.
    cluster.cancel(&id)?;
    let restored = cluster.cli_json(&["job", "submit", &wider, "--from-savepoint", &url])?;
    let id = restored["id"].as_str().context("no id")?.to_string();
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(60))?;
    cluster.cancel(&id)?;
    cluster.stop();
    Ok(())
}

/// Nexmark's SQL texts whose plans are SQL's own — q4's updating aggregates over a regular join, q5's window Top-N
/// of a window aggregate's rows, q8's interval join of two window aggregates — keep Flink's result through a
/// task manager SIGKILLed mid-run, and through a stop with savepoint at parallelism 2 and a restore of the same
/// script at 3 (`weir job submit q.sql --from-savepoint`).
#[test]
fn sql_jobs_hold_through_a_kill_and_a_rescale() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(2, 4))?;
    let submit = |cluster: &mut Cluster, run: &QueryRun, name: &str, from: Option<&str>| -> anyhow::Result<String> {
        let file = write(cluster.dir(), name, &run.sql()?)?;
        let mut args = vec!["job", "submit", file.as_str()];
        if let Some(url) = from {
            args.extend(["--from-savepoint", url]);
        }
        Ok(cluster.cli_json(&args)?["id"].as_str().context("no id")?.to_string())
    };
    for q in ["q4", "q5", "q8"] {
        let out = cluster.output_dir(&format!("sql-{q}-kill"))?;
        let mut run = QueryRun::new(q);
        (run.output, run.checkpoint_ms, run.rate_per_sec) = (Some(out.clone()), 200, 40_000);
        let id = submit(&mut cluster, &run, &format!("{q}-kill.sql"), None)?;
        cluster.finish_through_a_kill(&id, 3).context(q)?;
        check_result(q, &out).with_context(|| format!("{q} after a task manager kill"))?;

        let out = cluster.output_dir(&format!("sql-{q}-rescale"))?;
        let mut run = QueryRun::new(q);
        (run.output, run.checkpoint_ms, run.rate_per_sec) = (Some(out.clone()), 200, 40_000);
        let id = submit(&mut cluster, &run, &format!("{q}-at-2.sql"), None)?;
        cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
        cluster.wait_for_checkpoints(&id, 2, Duration::from_secs(60))?;
        let savepoint = cluster.stop_with_savepoint(&id, false, "native")?;
        (run.parallelism, run.splits, run.rate_per_sec) = (3, Some(2), 0);
        let id = submit(&mut cluster, &run, &format!("{q}-at-3.sql"), Some(&savepoint))?;
        cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(180))?;
        check_result(q, &out).with_context(|| format!("{q} after a rescale from 2 to 3"))?;
    }
    cluster.stop();
    Ok(())
}
