//! Key-group arithmetic, the same as Flink's `KeyGroupRangeAssignment` except for the hash: Weir hashes the
//! key's serialized bytes with murmur3 (x86, 32-bit, seed 0). This function must never change once state
//! exists, since it decides where every key's state lives.

use crate::ids::{KeyGroup, SubtaskIndex};
use serde::{Deserialize, Serialize};

/// The largest max parallelism (number of key groups) a job may have.
pub const UPPER_BOUND_MAX_PARALLELISM: u32 = 1 << 15;

/// The default max parallelism for a job of parallelism `p`: `min(max(next_pow2(p + p/2), 128), 32768)`.
pub fn default_max_parallelism(p: u32) -> u32 {
    let wanted = (p as u64 + p as u64 / 2).next_power_of_two();
    wanted.clamp(128, UPPER_BOUND_MAX_PARALLELISM as u64) as u32
}

/// The 32-bit murmur3 hash (x86, seed 0) of a key's bytes. Written over the slice rather than through the
/// `murmur3` crate's `Read`: it runs once per record, and the reader's per-block calls cost more than the hash.
/// A test checks it against the crate on arbitrary keys.
#[inline]
pub fn hash_key(key: &[u8]) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h: u32 = 0;
    let mut blocks = key.chunks_exact(4);
    for b in &mut blocks {
        let k = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        h ^= k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        let mut k: u32 = 0;
        for (i, b) in tail.iter().enumerate() {
            k |= (*b as u32) << (8 * i);
        }
        h ^= k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
    }
    h ^= key.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The key group of every key of a column (Arrow's binary layout: `offsets[i]..offsets[i + 1]` in `values`),
/// appended to `out`: a batch's keys hashed in one pass, each once.
pub fn key_groups_of_column(offsets: &[i32], values: &[u8], max_parallelism: u32, out: &mut Vec<u16>) {
    debug_assert!(max_parallelism <= UPPER_BOUND_MAX_PARALLELISM);
    out.reserve(offsets.len().saturating_sub(1));
    out.extend(offsets.windows(2).map(|w| {
        let key = values.get(w[0] as usize..w[1] as usize).unwrap_or_default();
        (hash_key(key) % max_parallelism) as u16
    }));
}

/// The key group of a serialized key, for `max_parallelism` key groups.
pub fn key_group_for_key(key: &[u8], max_parallelism: u32) -> KeyGroup {
    KeyGroup(hash_key(key) % max_parallelism)
}

/// The subtask that owns key group `kg`, for parallelism `p` and max parallelism `m`: `kg * p / m`.
#[inline]
pub fn subtask_for_key_group(kg: KeyGroup, p: u32, m: u32) -> SubtaskIndex {
    SubtaskIndex(((kg.0 as u64 * p as u64) / m as u64) as u32)
}

/// An inclusive, contiguous range of key groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KeyGroupRange {
    /// First key group in the range.
    pub start: u32,
    /// Last key group in the range (inclusive).
    pub end: u32,
}

impl KeyGroupRange {
    /// The range owned by subtask `i` of `p` for max parallelism `m`:
    /// `[ceil(i*m/p), floor(((i+1)*m - 1)/p)]`.
    pub fn for_subtask(i: SubtaskIndex, p: u32, m: u32) -> Self {
        let (i, p, m) = (i.0 as u64, p as u64, m as u64);
        let start = (i * m).div_ceil(p);
        let end = ((i + 1) * m - 1) / p;
        KeyGroupRange { start: start as u32, end: end as u32 }
    }

    /// Whether key group `kg` lies in this range.
    pub fn contains(&self, kg: KeyGroup) -> bool {
        kg.0 >= self.start && kg.0 <= self.end
    }

    /// Number of key groups in the range.
    pub fn len(&self) -> u32 {
        if self.end < self.start {
            0
        } else {
            self.end - self.start + 1
        }
    }

    /// Whether the range holds no key group.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key groups this range shares with `other`, if any.
    pub fn intersection(&self, other: &KeyGroupRange) -> Option<KeyGroupRange> {
        let r = KeyGroupRange { start: self.start.max(other.start), end: self.end.min(other.end) };
        (!self.is_empty() && !other.is_empty() && r.start <= r.end).then_some(r)
    }
}

/// Bytes of the key-group prefix of a RocksDB row key: 1 if `m <= 128`, else 2.
pub fn key_group_prefix_len(max_parallelism: u32) -> usize {
    if max_parallelism <= 128 {
        1
    } else {
        2
    }
}

/// Writes the big-endian key-group prefix of a row key.
pub fn write_key_group_prefix(kg: KeyGroup, max_parallelism: u32, out: &mut Vec<u8>) {
    if key_group_prefix_len(max_parallelism) == 1 {
        out.push(kg.0 as u8);
    } else {
        out.extend_from_slice(&(kg.0 as u16).to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_intersect_where_they_share_key_groups() {
        let r = |start, end| KeyGroupRange { start, end };
        assert_eq!(r(0, 10).intersection(&r(11, 20)), None);
        assert_eq!(r(0, 10).intersection(&r(10, 20)), Some(r(10, 10)));
        assert_eq!(r(5, 4).intersection(&r(0, 10)), None, "an empty range shares nothing");
    }

    #[test]
    fn default_max_parallelism_matches_flink() {
        assert_eq!(default_max_parallelism(1), 128);
        assert_eq!(default_max_parallelism(2), 128);
        assert_eq!(default_max_parallelism(100), 256);
        assert_eq!(default_max_parallelism(1000), 2048);
        assert_eq!(default_max_parallelism(30000), 32768);
    }

    #[test]
    fn ranges_match_flink_examples() {
        // Flink: KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex(128, 3, i)
        assert_eq!(KeyGroupRange::for_subtask(SubtaskIndex(0), 3, 128), KeyGroupRange { start: 0, end: 42 });
        assert_eq!(KeyGroupRange::for_subtask(SubtaskIndex(1), 3, 128), KeyGroupRange { start: 43, end: 85 });
        assert_eq!(KeyGroupRange::for_subtask(SubtaskIndex(2), 3, 128), KeyGroupRange { start: 86, end: 127 });
        assert_eq!(KeyGroupRange::for_subtask(SubtaskIndex(0), 2, 128), KeyGroupRange { start: 0, end: 63 });
        assert_eq!(KeyGroupRange::for_subtask(SubtaskIndex(1), 2, 128), KeyGroupRange { start: 64, end: 127 });
        assert_eq!(KeyGroupRange::for_subtask(SubtaskIndex(0), 1, 128), KeyGroupRange { start: 0, end: 127 });
    }

    #[test]
    fn ranges_cover_and_agree_with_owner() {
        for m in [1u32, 7, 128, 129, 1000, 4096, 32768] {
            for p in [1u32, 2, 3, 5, 7, 64, 127, 128] {
                if p > m {
                    continue;
                }
                let mut next = 0;
                for i in 0..p {
                    let r = KeyGroupRange::for_subtask(SubtaskIndex(i), p, m);
                    assert_eq!(r.start, next, "m={m} p={p} i={i}");
                    for kg in [r.start, r.end] {
                        assert_eq!(subtask_for_key_group(KeyGroup(kg), p, m), SubtaskIndex(i));
                    }
                    next = r.end + 1;
                }
                assert_eq!(next, m);
            }
        }
    }

    #[test]
    fn the_slice_hash_is_the_murmur3_crates() {
        use proptest::prelude::*;
        let mut runner = proptest::test_runner::TestRunner::default();
        runner
            .run(&proptest::collection::vec(any::<u8>(), 0..64), |key| {
                let expected = murmur3::murmur3_32(&mut std::io::Cursor::new(&key), 0).unwrap();
                prop_assert_eq!(hash_key(&key), expected);
                Ok(())
            })
            .unwrap();
        let keys: Vec<&[u8]> = vec![b"", b"a", b"abcd", b"hello world"];
        let mut offsets = vec![0i32];
        let mut values = Vec::new();
        for k in &keys {
            values.extend_from_slice(k);
            offsets.push(values.len() as i32);
        }
        let mut groups = Vec::new();
        key_groups_of_column(&offsets, &values, 128, &mut groups);
        let expected: Vec<u16> = keys.iter().map(|k| key_group_for_key(k, 128).0 as u16).collect();
        assert_eq!(groups, expected);
    }

    #[test]
    fn murmur3_known_values() {
        // Reference values of MurmurHash3_x86_32 with seed 0.
        assert_eq!(hash_key(b""), 0);
        assert_eq!(hash_key(b"hello"), 0x248b_fa47);
        assert_eq!(hash_key(b"Hello, world!"), 0xc036_3e43);
    }

    #[test]
    fn prefix_width() {
        let mut v = Vec::new();
        write_key_group_prefix(KeyGroup(5), 128, &mut v);
        assert_eq!(v, vec![5]);
        v.clear();
        write_key_group_prefix(KeyGroup(300), 4096, &mut v);
        assert_eq!(v, vec![1, 44]);
    }
}
