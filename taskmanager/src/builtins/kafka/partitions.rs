//! A Kafka source's splits are its topics' partitions. Each subtask reads the partitions [`owner`] gives it, and
//! the offset of each one's next record is operator state: a *union* list, so that on restore every subtask sees
//! every partition's position and keeps its own ([`owned`]) — whatever the old parallelism was, and without a
//! coordinator, as Flink's `FlinkKafkaConsumer` did. A partition no position names (new since the checkpoint, or
//! never read) starts where the config's `start` says.

use crate::api::operator::OperatorError;

/// Bytes of an element after the topic: partition, next offset, end.
const FIXED: usize = 4 + 8 + 8;

/// A partition of a topic, the offset of its next record and, for a bounded source, where it ends.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PartitionPosition {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// Offset of the next record to read.
    pub next: i64,
    /// Bounded sources: the offset it stops before (its end when first read, kept so that a restore stops at the
    /// same place); `None`: read on.
    pub end: Option<i64>,
}

/// The positions among `all` (every subtask's, from union state) that subtask `subtask` of `parallelism` reads;
/// a partition named twice is read from the earlier offset.
pub fn owned(all: Vec<PartitionPosition>, subtask: u32, parallelism: u32) -> Vec<PartitionPosition> {
    let mut mine: Vec<_> = all.into_iter().filter(|p| owner(&p.topic, p.partition, parallelism) == subtask).collect();
    mine.sort();
    mine.dedup_by(|a, b| a.topic == b.topic && a.partition == b.partition);
    mine
}

/// The partitions of `topics` (each a name and its partition count, from the broker's metadata) that subtask
/// `subtask` of `parallelism` owns and that `reading` does not name: all it owns at start, and at each discovery
/// the partitions of a topic grown in place or of a new one, which are the same to this rule.
pub fn unread(
    topics: &[(String, usize)],
    reading: &[&PartitionPosition],
    subtask: u32,
    parallelism: u32,
) -> Vec<(String, i32)> {
    let mut found = Vec::new();
    for (topic, count) in topics {
        for partition in 0..i32::try_from(*count).unwrap_or(i32::MAX) {
            let read = reading.iter().any(|p| p.topic == *topic && p.partition == partition);
            if !read && owner(topic, partition, parallelism) == subtask {
                found.push((topic.clone(), partition));
            }
        }
    }
    found
}

/// One position as a state element: the topic's length (u16, little-endian) and bytes, the partition (i32), the
/// next offset (i64) and the end (i64, −1: none).
pub fn encode_position(p: &PartitionPosition) -> Vec<u8> {
    let mut e = Vec::with_capacity(2 + p.topic.len() + FIXED);
    e.extend_from_slice(&(p.topic.len() as u16).to_le_bytes());
    e.extend_from_slice(p.topic.as_bytes());
    e.extend_from_slice(&p.partition.to_le_bytes());
    e.extend_from_slice(&p.next.to_le_bytes());
    e.extend_from_slice(&p.end.unwrap_or(-1).to_le_bytes());
    e
}

/// The positions a union list state holds; a malformed element is an error naming the source `uid`.
pub fn decode_positions(elements: &[Vec<u8>], uid: &str) -> Result<Vec<PartitionPosition>, OperatorError> {
    let corrupt =
        |why: &str| OperatorError::UnreadableState(format!("kafka source {uid:?}: corrupt partition state: {why}"));
    elements
        .iter()
        .map(|e| {
            let (len, rest) = e.split_first_chunk::<2>().ok_or_else(|| corrupt("an element shorter than 2 bytes"))?;
            let len = usize::from(u16::from_le_bytes(*len));
            if rest.len() != len + FIXED {
                return Err(corrupt(&format!("an element of {} bytes for a topic name of {len}", e.len())));
            }
            let (topic, rest) = rest.split_at(len);
            let topic = std::str::from_utf8(topic).map_err(|_| corrupt("a topic name that is not UTF-8"))?;
            let (partition, rest) = rest.split_at(4);
            let (next, end) = rest.split_at(8);
            let partition = i32::from_le_bytes(partition.try_into().map_err(|_| corrupt("no partition"))?);
            let next = i64::from_le_bytes(next.try_into().map_err(|_| corrupt("no offset"))?);
            let end = i64::from_le_bytes(end.try_into().map_err(|_| corrupt("no end"))?);
            if partition < 0 || next < 0 || end < -1 {
                return Err(corrupt(&format!("partition {partition} at offset {next}, end {end}")));
            }
            Ok(PartitionPosition { topic: topic.to_string(), partition, next, end: (end >= 0).then_some(end) })
        })
        .collect()
}

/// Java's `String.hashCode` (over UTF-16 code units, wrapping), which Flink's assignment starts from.
fn java_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The subtask of `parallelism` that reads `topic`'s `partition`: Flink's `KafkaSourceEnumerator` rule, a
/// topic's partitions dealt round-robin from a subtask that depends on the topic, so partitions of several
/// topics spread evenly and a partition added later has an owner without asking anyone.
pub fn owner(topic: &str, partition: i32, parallelism: u32) -> u32 {
    let p = i64::from(parallelism.max(1));
    let start = (i64::from(java_hash(topic).wrapping_mul(31)) & 0x7FFF_FFFF) % p;
    ((start + i64::from(partition)) % p) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(topic: &str, partition: i32, next: i64) -> PartitionPosition {
        PartitionPosition { topic: topic.into(), partition, next, end: None }
    }

    #[test]
    fn owners_follow_flinks_rule() {
        // Java: "events".hashCode() = -1291329255; * 31, & 0x7FFFFFFF = 770982407; mod 4 = 3.
        assert_eq!((0..6).map(|p| owner("events", p, 4)).collect::<Vec<_>>(), vec![3, 0, 1, 2, 3, 0]);
        // Non-ASCII names hash their UTF-16 units: "é" is one unit, 0xE9.
        assert_eq!(owner("anything", 7, 1), 0);
    }

    #[test]
    fn every_partition_has_exactly_one_owner_at_any_parallelism() {
        for parallelism in 1..=7u32 {
            let all: Vec<_> = ["a", "events", "clicks-2026"]
                .iter()
                .flat_map(|t| (0..13).map(move |p| pos(t, p, i64::from(p) * 10)))
                .collect();
            let mut seen: Vec<_> = (0..parallelism).flat_map(|s| owned(all.clone(), s, parallelism)).collect();
            seen.sort();
            let mut want = all.clone();
            want.sort();
            assert_eq!(seen, want, "parallelism {parallelism}");
            // Spread evenly: with 39 partitions no subtask has more than its share plus one per topic.
            for s in 0..parallelism {
                let n = owned(all.clone(), s, parallelism).len() as u32;
                assert!(n <= 39 / parallelism + 3, "subtask {s} of {parallelism} owns {n}");
            }
        }
    }

    #[test]
    fn discovery_adds_the_owned_partitions_of_a_grown_topic_and_of_a_new_one() {
        let sizes = |a: usize, b: usize| {
            let mut t = vec![("a".to_string(), a)];
            if b > 0 {
                t.push(("b".to_string(), b));
            }
            t
        };
        for parallelism in 1..=4 {
            // Every subtask at start, then each growth: together they add every partition once.
            let mut reading: Vec<Vec<PartitionPosition>> = vec![Vec::new(); parallelism as usize];
            for (a, b) in [(2, 0), (3, 0), (3, 2), (5, 3)] {
                let mut added = Vec::new();
                for subtask in 0..parallelism {
                    let mine = &mut reading[subtask as usize];
                    let new = unread(&sizes(a, b), &mine.iter().collect::<Vec<_>>(), subtask, parallelism);
                    for (topic, partition) in &new {
                        assert_eq!(owner(topic, *partition, parallelism), subtask);
                        mine.push(pos(topic, *partition, 0));
                    }
                    added.extend(new);
                }
                added.sort();
                let total: usize = reading.iter().map(Vec::len).sum();
                assert_eq!(total, a + b, "parallelism {parallelism}, sizes {a} {b}");
                let mut all: Vec<(String, i32)> =
                    reading.iter().flatten().map(|p| (p.topic.clone(), p.partition)).collect();
                all.sort();
                all.dedup();
                assert_eq!(all.len(), a + b, "a partition read twice at parallelism {parallelism}");
                assert!(!added.is_empty());
            }
        }
        // What a subtask reads is never added again, and a topic grown from 2 to 3 adds partition 2 only.
        let reading = [pos("a", 0, 7), pos("a", 1, 9)];
        let refs: Vec<&PartitionPosition> = reading.iter().collect();
        assert_eq!(unread(&sizes(3, 0), &refs, 0, 1), vec![("a".to_string(), 2)]);
        assert!(unread(&sizes(2, 0), &refs, 0, 1).is_empty());
    }

    #[test]
    fn positions_round_trip_and_corrupt_elements_are_refused() {
        let bounded = PartitionPosition { end: Some(40), ..pos("b", 2, 30) };
        let positions = vec![pos("events", 0, 0), pos("é-topic", 3, i64::MAX), pos("", 1, 7), bounded];
        let elements: Vec<_> = positions.iter().map(encode_position).collect();
        assert_eq!(decode_positions(&elements, "src").unwrap(), positions);
        let mut short = elements[0].clone();
        short.pop();
        let mut negative = vec![encode_position(&pos("t", 0, 0))];
        negative[0][3..7].copy_from_slice(&(-1i32).to_le_bytes());
        for (bad, says) in
            [(vec![vec![1u8]], "shorter"), (vec![short], "bytes for a topic"), (negative, "partition -1")]
        {
            let e = decode_positions(&bad, "src").unwrap_err().to_string();
            assert!(e.contains("kafka source \"src\"") && e.contains(says), "{e}");
        }
    }

    #[test]
    fn a_duplicated_position_is_kept_once() {
        // Should union state hold a partition twice, it is read once, from the earlier offset (records again,
        // rather than records lost).
        let mine = owned(vec![pos("t", 0, 9), pos("t", 0, 5)], 0, 1);
        assert_eq!(mine, vec![pos("t", 0, 5)]);
    }
}

#[cfg(test)]
mod owner_tests {
    use super::*;

    #[test]
    fn the_owner_rule_hashes_topics_as_java_does() {
        assert_eq!(java_hash("events"), -1291329255);
        assert_eq!(java_hash("é"), 0xE9);
        assert_eq!((0..6).map(|p| owner("events", p, 4)).collect::<Vec<_>>(), vec![3, 0, 1, 2, 3, 0]);
    }
}
