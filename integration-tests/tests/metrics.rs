//! A task manager started with `--metrics-bind` (here through `WEIR_METRICS_BIND`) serves Prometheus text at
//! `/metrics` with the records each task handled and its checkpoint costs.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;
use weir_integration_tests::{Cluster, ClusterOptions, CountJob, JobState};

fn get(addr: &str, path: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// The sum of the samples of `name` whose labels contain `label` (`None` if there is none). Samples come in
/// no particular order, one per task.
fn total(text: &str, name: &str, label: &str) -> Option<f64> {
    let values: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse().ok()))
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

#[test]
fn taskmanager_serves_record_and_checkpoint_metrics() -> anyhow::Result<()> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let addr = format!("127.0.0.1:{port}");
    // Only the task manager gets the variable: the job manager reads WEIR_METRICS_BIND too.
    let mut cluster = Cluster::start(ClusterOptions::new(0, 2))?;
    cluster.start_taskmanager_with_env(&[("WEIR_METRICS_BIND".into(), addr.clone())])?;
    let job = CountJob::bounded("metrics", 200_000, 1000, 7).rate(50_000).checkpoint_every_ms(300).into_blackhole();
    let id = cluster.submit(&job.yaml())?;
    cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(90))?;

    let page = get(&addr, "/metrics")?;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    let job_label = format!("job_id=\"{id}\"");
    // Every record reached the counters, and the blackhole discarded one count per key at end of input.
    let discarded = total(&page, "weir_blackhole_records_total", &job_label);
    assert_eq!(discarded, Some(1000.0), "{page}");
    let records_in = total(&page, "weir_records_in_total", &format!("{job_label},vertex=\"1\""));
    assert_eq!(records_in, Some(200_000.0), "the counting vertex received every record");
    assert!(page.contains("weir_checkpoint_sync_seconds"), "{page}");
    // The stateless sink uploads nothing; the sum over the job's tasks is what the keyed and source tasks wrote.
    assert!(total(&page, "weir_checkpoint_uploaded_bytes_total", &job_label).is_some_and(|b| b > 0.0), "{page}");
    // RocksDB's own properties, per operator and state, published by the task threads every few seconds.
    let keys_line = page
        .lines()
        .find(|l| {
            l.starts_with("weir_rocksdb_property")
                && l.contains(&job_label)
                && l.contains("operator=\"counts\"")
                && l.contains("state=\"count\"")
                && l.contains("property=\"rocksdb.estimate-num-keys\"")
        })
        .ok_or_else(|| anyhow::anyhow!("no rocksdb.estimate-num-keys gauge for the counts operator:\n{page}"))?;
    assert!(keys_line.contains("rocksdb.estimate-num-keys"));
    assert!(get(&addr, "/nope")?.starts_with("HTTP/1.1 404"));
    cluster.stop();
    Ok(())
}

/// The value of the one sample of `name` whose labels contain all of `labels`.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|label| l.contains(label)))
        .find_map(|l| l.rsplit(' ').next().and_then(|v| v.parse().ok()))
}

#[test]
fn taskmanager_serves_event_time_metrics() -> anyhow::Result<()> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let addr = format!("127.0.0.1:{port}");
    let mut cluster = Cluster::start(ClusterOptions::new(0, 2))?;
    cluster.start_taskmanager_with_env(&[("WEIR_METRICS_BIND".into(), addr.clone())])?;
    // Records stamped with the wall clock as they leave the source, watermarks 100 ms behind them.
    let spec = "name: event-time-metrics\n\
                parallelism: 1\n\
                operators:\n  \
                  - { uid: events, kind: datagen, config: { keys: 10, rate_per_sec: 2000, event_time: { wall_clock: true } },\n      \
                      watermarks: { max_out_of_orderness_ms: 100, auto_watermark_interval_ms: 50 } }\n  \
                  - { uid: sink, kind: blackhole, input: events, partitioning: rebalance }\n";
    let id = cluster.submit(spec)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    let job_label = format!("job_id=\"{id}\"");
    let sink = ["vertex=\"1\""];
    let page = weir_integration_tests::wait_until("event-time metrics", Duration::from_secs(30), || {
        let page = get(&addr, "/metrics")?;
        // Gauges read 0 until first set.
        let set = |name: &str, labels: &[&str]| sample(&page, name, labels).is_some_and(|v| v != 0.0);
        let ready = set("weir_watermark_ms", &[&job_label, sink[0]])
            && set("weir_watermark_lag_ms", &[&job_label, sink[0]])
            && sample(&page, "weir_blackhole_lag_ms", &[&job_label, "quantile=\"0.99\""]).is_some();
        Ok(ready.then_some(page))
    })?;
    let now = weir_common::now_ms() as f64;
    // The sink task's watermark trails the wall clock by about the out-of-orderness, and so does its lag.
    let watermark = sample(&page, "weir_watermark_ms", &[&job_label, sink[0]]).unwrap_or(0.0);
    assert!(now - watermark > 100.0 && now - watermark < 30_000.0, "watermark {watermark} at {now}:\n{page}");
    let lag = sample(&page, "weir_watermark_lag_ms", &[&job_label, sink[0]]).unwrap_or(-1.0);
    assert!(lag > 100.0 && lag < 30_000.0, "watermark lag {lag}:\n{page}");
    // Records reach the sink within a few milliseconds of leaving the source; none is late (the bound covers
    // the one-millisecond steps of the stamps).
    let p99 = sample(&page, "weir_blackhole_lag_ms", &[&job_label, "quantile=\"0.99\""]).unwrap_or(-1.0);
    assert!((0.0..1_000.0).contains(&p99), "p99 lag {p99}:\n{page}");
    assert_eq!(sample(&page, "weir_late_records_total", &[&job_label, "operator=\"sink\""]).unwrap_or(0.0), 0.0);
    cluster.cancel(&id)?;
    cluster.stop();
    Ok(())
}
