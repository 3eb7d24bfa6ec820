//! Split positions as operator list state, for sources that read numbered splits: one element per split (its id
//! and the index of its next record), so each split resumes where the checkpoint left it and the splits are
//! dealt out again when the source rescales (Flink's `SplitDistribute` list state).

use crate::api::operator::OperatorError;

/// Where one split of a source stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitPosition {
    /// The split's id.
    pub id: u32,
    /// The index of its next record.
    pub next: u64,
}

/// Bytes of one encoded position: the id and the index, little-endian.
const ENCODED: usize = 12;

/// Reads the positions a list state holds; `source` names the kind in the error about a corrupt element.
pub fn read_positions(list: &[Vec<u8>], source: &str) -> Result<Vec<SplitPosition>, OperatorError> {
    list.iter()
        .map(|e| {
            let bytes: &[u8; ENCODED] = e
                .as_slice()
                .try_into()
                .map_err(|_| OperatorError::Other(format!("{source}: corrupt split state of {} bytes", e.len())))?;
            let [a, b, c, d, rest @ ..] = *bytes;
            Ok(SplitPosition { id: u32::from_le_bytes([a, b, c, d]), next: u64::from_le_bytes(rest) })
        })
        .collect()
}

/// Replaces what a list state holds with `positions`.
pub fn write_positions(list: &mut Vec<Vec<u8>>, positions: impl IntoIterator<Item = SplitPosition>) {
    list.clear();
    for p in positions {
        let mut e = Vec::with_capacity(ENCODED);
        e.extend_from_slice(&p.id.to_le_bytes());
        e.extend_from_slice(&p.next.to_le_bytes());
        list.push(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_round_trip_and_a_corrupt_one_is_named() {
        let positions = [SplitPosition { id: 7, next: 0 }, SplitPosition { id: u32::MAX, next: u64::MAX }];
        let mut list = vec![vec![1]];
        write_positions(&mut list, positions);
        assert_eq!(read_positions(&list, "src").unwrap(), positions);
        list.push(vec![0; 11]);
        let e = read_positions(&list, "src").unwrap_err().to_string();
        assert!(e.contains("src") && e.contains("11 bytes"), "{e}");
    }
}
