//! A processing-time clock read from a file (`clock_file`), so that tests of whole processes move a task
//! manager's clock by writing a number: processing-time timers and TTL then follow it instead of the wall clock.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use weir_state::Clock;

/// The time in a file: milliseconds since the epoch as decimal text, read on every call.
#[derive(Debug)]
pub struct FileClock {
    path: PathBuf,
    /// The last time read: kept while the file is being rewritten (or unreadable), so time never goes back.
    last: AtomicU64,
}

impl FileClock {
    /// A clock showing what `path` holds.
    pub fn new(path: PathBuf) -> Self {
        let clock = FileClock { path, last: AtomicU64::new(0) };
        clock.now_ms();
        clock
    }
}

/// The time `text` holds, if it is one.
pub fn parse_clock(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

impl Clock for FileClock {
    fn now_ms(&self) -> u64 {
        let read = std::fs::read_to_string(&self.path).ok().and_then(|t| parse_clock(&t));
        match read {
            Some(t) => self.last.fetch_max(t, Ordering::SeqCst).max(t),
            None => self.last.load(Ordering::SeqCst),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_follows_its_file_and_never_goes_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("clock");
        let clock = FileClock::new(path.clone());
        assert_eq!(clock.now_ms(), 0, "no file yet");
        std::fs::write(&path, "1000\n").unwrap();
        assert_eq!(clock.now_ms(), 1000);
        std::fs::write(&path, "").unwrap();
        assert_eq!(clock.now_ms(), 1000, "a file being rewritten keeps the last time");
        std::fs::write(&path, "500").unwrap();
        assert_eq!(clock.now_ms(), 1000, "time does not go back");
        std::fs::write(&path, "2500").unwrap();
        assert_eq!(clock.now_ms(), 2500);
    }
}
