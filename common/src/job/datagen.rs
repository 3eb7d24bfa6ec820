//! The datagen record formula (DESIGN §10): record `i` has key `splitmix64(seed + i) mod keys`, keyed by its
//! 8 big-endian bytes, and value 1. Shared by the source and by everything that verifies output.

use serde::{Deserialize, Serialize};

/// Event timestamps of `datagen` (DESIGN §10): within a split, the record at position `q` whose global index is
/// `i` has timestamp `start_ms + q·step_ms − d(i)`, `d(i) = splitmix64(splitmix64(seed + i)) mod
/// (max_disorder_ms + 1)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventTimeConfig {
    /// Timestamp of each split's first record (before disorder), ms since the epoch.
    #[serde(default)]
    pub start_ms: i64,
    /// Event time between consecutive records of a split, ms.
    #[serde(default = "one")]
    pub step_ms: u64,
    /// Most a record's timestamp is moved back, ms.
    #[serde(default)]
    pub max_disorder_ms: u64,
    /// Instead of the formula, the wall-clock time at which the record leaves the source (Flink's ingestion
    /// time): what the latency benchmark measures from. The other fields must then be left out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wall_clock: bool,
}

fn one() -> u64 {
    1
}

/// The splitmix64 mixing function, with wrapping 64-bit arithmetic.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The key (as a number) of record `i`.
pub fn key_of(seed: u64, i: u64, keys: u64) -> u64 {
    splitmix64(seed.wrapping_add(i)) % keys
}

/// The event timestamp of record `i`, at position `q` of its split (DESIGN §10).
pub fn timestamp_of(t: &EventTimeConfig, seed: u64, i: u64, q: u64) -> i64 {
    let disorder = splitmix64(splitmix64(seed.wrapping_add(i))) % t.max_disorder_ms.saturating_add(1);
    t.start_ms.saturating_add(q.saturating_mul(t.step_ms).min(i64::MAX as u64) as i64).saturating_sub(disorder as i64)
}

/// The half-open index range `[start, end)` of split `j` of `splits`, for `count` records
/// (`None` = unbounded, where the ranges cut the whole u64 space).
pub fn split_range(j: u32, splits: u32, count: Option<u64>) -> (u64, u64) {
    let n: u128 = match count {
        Some(c) => c as u128,
        None => u64::MAX as u128 + 1,
    };
    let s = splits as u128;
    let start = (j as u128 * n / s) as u64;
    let end = ((j as u128 + 1) * n / s).min(u64::MAX as u128) as u64;
    (start, end)
}

/// The expected per-key counts of a bounded datagen: `counts[k]` for key `k`.
pub fn expected_counts(seed: u64, count: u64, keys: u64) -> Vec<u64> {
    let mut counts = vec![0u64; keys as usize];
    for i in 0..count {
        counts[key_of(seed, i, keys) as usize] += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_reference() {
        // Reference outputs of splitmix64 starting from state 0 (Vigna's generator: state += golden gamma).
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(0x9E37_79B9_7F4A_7C15), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn splits_cover_everything() {
        for count in [0u64, 1, 5, 1000, 2_000_001] {
            let mut next = 0;
            for j in 0..128 {
                let (s, e) = split_range(j, 128, Some(count));
                assert_eq!(s, next);
                next = e;
            }
            assert_eq!(next, count);
        }
        assert_eq!(split_range(127, 128, None).1, u64::MAX);
    }
}
