//! One cluster at a time per build: every [`crate::Cluster`] holds [`ClusterLock`], a file lock next to the
//! binaries it runs. On a 2-core machine two clusters at once starve each other's heartbeats; nextest runs
//! the cluster tests one by one (`.config/nextest.toml`), but plain `cargo test` runs the tests of one file
//! on parallel threads, and this lock keeps them apart under either runner.

use anyhow::{bail, Context, Result};
use std::cell::RefCell;
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How long a cluster waits for another test's cluster to stop before giving up.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(20 * 60);
/// How often a waiting cluster tries the lock again.
const RETRY: Duration = Duration::from_millis(100);

thread_local! {
    // A thread that already holds the lock (a test with two clusters) shares it instead of waiting for itself.
    static HELD: RefCell<Weak<Held>> = const { RefCell::new(Weak::new()) };
}

struct Held {
    file: File,
}

impl Drop for Held {
    fn drop(&mut self) {
        // Closing the file releases the lock too; unlocking first makes the release independent of when.
        let _ = self.file.unlock();
    }
}

/// The exclusive right to run a cluster; released when the last holder on its thread drops it.
#[derive(Clone)]
pub struct ClusterLock {
    _held: Arc<Held>,
}

impl std::fmt::Debug for ClusterLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterLock")
    }
}

/// The lock file of the binaries in `bin_dir`: one per build directory, so that separate checkouts do not
/// wait for each other.
pub fn lock_path(bin_dir: &Path) -> PathBuf {
    bin_dir.join(".weir-cluster.lock")
}

impl ClusterLock {
    /// Takes the lock at `path`, waiting up to `timeout` for whoever holds it.
    pub fn acquire(path: &Path, timeout: Duration) -> Result<ClusterLock> {
        if let Some(held) = HELD.with(|h| h.borrow().upgrade()) {
            return Ok(ClusterLock { _held: held });
        }
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .with_context(|| format!("cannot open the cluster lock {}", path.display()))?;
        let start = Instant::now();
        let mut announced = false;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(e)) => {
                    return Err(e).with_context(|| format!("cannot lock {}", path.display()));
                }
            }
            if !announced {
                eprintln!("waiting for another cluster of this build to stop (lock {})", path.display());
                announced = true;
            }
            if start.elapsed() >= timeout {
                bail!(
                    "another cluster held {} for over {timeout:?}: tests that start clusters run one at a time",
                    path.display()
                );
            }
            std::thread::sleep(RETRY);
        }
        let held = Arc::new(Held { file });
        HELD.with(|h| *h.borrow_mut() = Arc::downgrade(&held));
        Ok(ClusterLock { _held: held })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_thread_waits_and_the_holding_thread_shares() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path(dir.path());
        let first = ClusterLock::acquire(&path, Duration::from_secs(5)).unwrap();
        let again = ClusterLock::acquire(&path, Duration::from_secs(5)).expect("the holding thread shares");
        let p = path.clone();
        let other = std::thread::spawn(move || ClusterLock::acquire(&p, Duration::from_millis(300)).map(|_| ()));
        let err = other.join().unwrap().unwrap_err();
        assert!(err.to_string().contains("one at a time"), "{err}");
        drop(first);
        drop(again);
        let p = path.clone();
        let other = std::thread::spawn(move || ClusterLock::acquire(&p, Duration::from_secs(5)).map(|_| ()));
        other.join().unwrap().expect("free once every holder dropped it");
    }
}
