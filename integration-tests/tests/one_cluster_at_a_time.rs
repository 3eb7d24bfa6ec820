//! Two clusters of one build never run at once, whichever test runner: plain `cargo test` runs the tests of
//! a file on parallel threads, and on 2 cores two clusters starve each other's 300 ms heartbeats. A second
//! thread's `Cluster::start` must wait until the first cluster stopped.

use std::sync::mpsc;
use std::time::{Duration, Instant};
use weir_integration_tests::{Cluster, ClusterOptions};

/// How long the first cluster stays up waiting to hear that the second one started (it must not).
const OVERLAP_WINDOW: Duration = Duration::from_secs(4);

#[test]
fn a_second_cluster_starts_only_after_the_first_stopped() -> anyhow::Result<()> {
    let first = Cluster::start(ClusterOptions::new(1, 1))?;
    let first_up = Instant::now();
    let (started_tx, started_rx) = mpsc::channel::<Instant>();
    let second = std::thread::spawn(move || -> anyhow::Result<()> {
        let cluster = Cluster::start(ClusterOptions::new(1, 1))?;
        let _ = started_tx.send(Instant::now());
        cluster.stop();
        Ok(())
    });
    // A cluster starts in about a second here; without the lock the second one is up well within the window.
    let overlapped = started_rx.recv_timeout(OVERLAP_WINDOW).ok();
    first.stop();
    second.join().map_err(|_| anyhow::anyhow!("the second cluster's thread panicked"))??;
    if let Some(at) = overlapped {
        panic!("the second cluster was up {:?} after the first, which still ran", at - first_up);
    }
    Ok(())
}
