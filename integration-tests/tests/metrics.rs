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
