//! Operator (non-keyed) state of one subtask: named lists of byte elements (`SPLIT_DISTRIBUTE` list state and
//! `UNION` list state) and broadcast map states. A snapshot is one blob in which each element is a
//! little-endian `u32` length and its bytes, plus, per state, the offset of each element (the
//! [`StateMetaInfo`] the job manager needs to redistribute elements without reading the blob). A broadcast
//! state is one element: its whole map (every subtask holds the same copy).
//!
//! Restore: the job manager decides which elements of which old blobs each new subtask gets (its own at the
//! same parallelism, round-robin shares on rescale, every union element always, one broadcast copy); the task
//! manager reads them with [`OperatorStateStore::restore_elements`].

use crate::error::StateError;
use std::collections::BTreeMap;
use weir_common::checkpoint::{DistributionMode, Offsets, StateMetaInfo};

/// The operator states of one subtask.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OperatorStateStore {
    states: BTreeMap<String, (DistributionMode, Vec<Vec<u8>>)>,
    broadcast: BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>,
}

fn encode_map(map: &BTreeMap<Vec<u8>, Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(map.len() as u32).to_le_bytes());
    for (k, v) in map {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
    }
    out
}

fn decode_map(name: &str, mut b: &[u8]) -> Result<BTreeMap<Vec<u8>, Vec<u8>>, StateError> {
    let corrupt = || StateError::Corrupt(format!("broadcast state {name:?} is truncated"));
    let take = |n: usize, b: &mut &[u8]| -> Result<Vec<u8>, StateError> {
        if b.len() < n {
            return Err(corrupt());
        }
        let (head, tail) = b.split_at(n);
        *b = tail;
        Ok(head.to_vec())
    };
    let u32_of = |v: Vec<u8>| u32::from_le_bytes([v[0], v[1], v[2], v[3]]) as usize;
    let n = u32_of(take(4, &mut b)?);
    let mut map = BTreeMap::new();
    for _ in 0..n {
        let kl = u32_of(take(4, &mut b)?);
        let k = take(kl, &mut b)?;
        let vl = u32_of(take(4, &mut b)?);
        let v = take(vl, &mut b)?;
        map.insert(k, v);
    }
    Ok(map)
}

/// The elements at `offsets` of a blob (each a little-endian `u32` length and its bytes).
pub fn read_elements(name: &str, blob: &[u8], offsets: &[u64]) -> Result<Vec<Vec<u8>>, StateError> {
    let mut elems = Vec::with_capacity(offsets.len());
    for &off in offsets {
        let corrupt = |what: &str| StateError::Corrupt(format!("operator state {name:?}: element at {off} {what}"));
        let off = usize::try_from(off).map_err(|_| corrupt("out of range"))?;
        let len_bytes = blob.get(off..off.saturating_add(4)).ok_or_else(|| corrupt("out of range"))?;
        let len = u32::from_le_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]) as usize;
        let body = blob.get(off + 4..(off + 4).saturating_add(len)).ok_or_else(|| corrupt("truncated"))?;
        elems.push(body.to_vec());
    }
    Ok(elems)
}

/// Decodes an offsets file: one little-endian `u64` per element.
pub fn decode_offsets(bytes: &[u8]) -> Result<Vec<u64>, StateError> {
    if !bytes.len().is_multiple_of(8) {
        return Err(StateError::Corrupt(format!("an offsets file of {} bytes is not a multiple of 8", bytes.len())));
    }
    Ok(bytes.chunks_exact(8).map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect())
}

/// Encodes offsets as an offsets file.
pub fn encode_offsets(offsets: &[u64]) -> Vec<u8> {
    offsets.iter().flat_map(|o| o.to_le_bytes()).collect()
}

impl OperatorStateStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rebuilds a store from a snapshot blob whose meta info has inline offsets (tests and tools; a task
    /// restores through [`OperatorStateStore::restore_elements`]).
    pub fn restore(blob: &[u8], metas: &[StateMetaInfo]) -> Result<Self, StateError> {
        let mut store = OperatorStateStore::default();
        for meta in metas {
            let Offsets::Inline(offsets) = &meta.offsets else {
                return Err(StateError::Corrupt(format!("operator state {:?}: offsets are in a file", meta.name)));
            };
            store.restore_elements(&meta.name, meta.mode, blob, offsets)?;
        }
        Ok(store)
    }

    /// Adds the elements at `offsets` of `blob` to state `name` (created with `mode`); for a broadcast state,
    /// the first element is its map (every copy is the same).
    pub fn restore_elements(
        &mut self,
        name: &str,
        mode: DistributionMode,
        blob: &[u8],
        offsets: &[u64],
    ) -> Result<(), StateError> {
        let elems = read_elements(name, blob, offsets)?;
        match mode {
            DistributionMode::Broadcast => {
                if let Some(e) = elems.first() {
                    let map = decode_map(name, e)?;
                    self.broadcast.entry(name.to_string()).or_default().extend(map);
                } else {
                    self.broadcast.entry(name.to_string()).or_default();
                }
            }
            _ => {
                let entry = self.states.entry(name.to_string()).or_insert((mode, Vec::new()));
                if entry.0 != mode {
                    return Err(StateError::Corrupt(format!(
                        "operator state {name:?} is stored as {:?} and as {mode:?}",
                        entry.0
                    )));
                }
                entry.1.extend(elems);
            }
        }
        Ok(())
    }

    fn state(&mut self, name: &str, mode: DistributionMode) -> Result<&mut Vec<Vec<u8>>, StateError> {
        if self.broadcast.contains_key(name) {
            return Err(StateError::Declaration {
                name: name.to_string(),
                message: format!("declared as {mode:?} but stored as a broadcast state"),
            });
        }
        let entry = self.states.entry(name.to_string()).or_insert((mode, Vec::new()));
        if entry.0 != mode {
            return Err(StateError::Declaration {
                name: name.to_string(),
                message: format!("declared as {:?} but stored as {:?}", mode, entry.0),
            });
        }
        Ok(&mut entry.1)
    }

    /// A list state redistributed round-robin on rescale (`SPLIT_DISTRIBUTE`).
    pub fn list_state(&mut self, name: &str) -> Result<&mut Vec<Vec<u8>>, StateError> {
        self.state(name, DistributionMode::SplitDistribute)
    }

    /// A list state given whole to every subtask on restore (`UNION`).
    pub fn union_list_state(&mut self, name: &str) -> Result<&mut Vec<Vec<u8>>, StateError> {
        self.state(name, DistributionMode::Union)
    }

    /// A broadcast map state: every subtask holds the same copy (written by the operator on each subtask).
    pub fn broadcast_state(&mut self, name: &str) -> Result<&mut BTreeMap<Vec<u8>, Vec<u8>>, StateError> {
        if self.states.contains_key(name) {
            return Err(StateError::Declaration {
                name: name.to_string(),
                message: "declared as a broadcast state but stored as a list state".into(),
            });
        }
        Ok(self.broadcast.entry(name.to_string()).or_default())
    }

    /// Whether no state holds any element.
    pub fn is_empty(&self) -> bool {
        self.states.values().all(|(_, v)| v.is_empty()) && self.broadcast.values().all(|m| m.is_empty())
    }

    /// Serializes every state into one blob plus per-state element offsets (inline; the task manager moves
    /// large ones to files). A state's elements are contiguous in the blob.
    pub fn snapshot(&self) -> (Vec<u8>, Vec<StateMetaInfo>) {
        let bytes: usize = self.states.values().flat_map(|(_, e)| e.iter()).map(|e| e.len() + 4).sum();
        let mut blob = Vec::with_capacity(bytes);
        let mut metas = Vec::with_capacity(self.states.len() + self.broadcast.len());
        for (name, (mode, elems)) in &self.states {
            let start = blob.len();
            let mut offsets = Vec::with_capacity(elems.len());
            for e in elems {
                offsets.push(blob.len() as u64);
                blob.extend_from_slice(&(e.len() as u32).to_le_bytes());
                blob.extend_from_slice(e);
            }
            metas.push(StateMetaInfo::inline(name.clone(), *mode, offsets, (blob.len() - start) as u64));
        }
        for (name, map) in &self.broadcast {
            let offset = blob.len() as u64;
            let e = encode_map(map);
            blob.extend_from_slice(&(e.len() as u32).to_le_bytes());
            blob.extend_from_slice(&e);
            metas.push(StateMetaInfo::inline(
                name.clone(),
                DistributionMode::Broadcast,
                vec![offset],
                e.len() as u64 + 4,
            ));
        }
        (blob, metas)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_round_trip_and_mode_conflicts() {
        let mut s = OperatorStateStore::new();
        s.list_state("splits").unwrap().extend([b"a".to_vec(), b"bcd".to_vec()]);
        s.union_list_state("u").unwrap().push(vec![]);
        let (blob, metas) = s.snapshot();
        assert_eq!(metas[0].offsets, Offsets::Inline(vec![0, 5]));
        let mut r = OperatorStateStore::restore(&blob, &metas).unwrap();
        assert_eq!(r, s);
        assert!(r.union_list_state("splits").is_err());
        assert!(OperatorStateStore::restore(&blob[..6], &metas).is_err());
    }

    #[test]
    fn elements_restore_from_several_blobs_and_broadcast_states_round_trip() {
        // Two subtasks with their own list and union elements and the same broadcast state.
        let mut subtasks = Vec::new();
        for i in 0..2u8 {
            let mut s = OperatorStateStore::new();
            s.list_state("splits").unwrap().push(vec![i]);
            s.union_list_state("offsets").unwrap().extend([vec![10 + i], vec![20 + i]]);
            s.broadcast_state("rules").unwrap().insert(b"r1".to_vec(), b"deny".to_vec());
            subtasks.push(s.snapshot());
        }
        let offsets_of =
            |metas: &[StateMetaInfo], name: &str| match &metas.iter().find(|m| m.name == name).unwrap().offsets {
                Offsets::Inline(o) => o.clone(),
                Offsets::File(_) => panic!("inline"),
            };
        let mut r = OperatorStateStore::new();
        for (blob, metas) in &subtasks {
            r.restore_elements("offsets", DistributionMode::Union, blob, &offsets_of(metas, "offsets")).unwrap();
        }
        let (blob1, metas1) = &subtasks[1];
        r.restore_elements("splits", DistributionMode::SplitDistribute, blob1, &offsets_of(metas1, "splits")).unwrap();
        r.restore_elements("rules", DistributionMode::Broadcast, blob1, &offsets_of(metas1, "rules")).unwrap();
        assert_eq!(r.list_state("splits").unwrap(), &vec![vec![1u8]]);
        assert_eq!(r.union_list_state("offsets").unwrap(), &vec![vec![10u8], vec![20], vec![11], vec![21]]);
        assert_eq!(r.broadcast_state("rules").unwrap().get(&b"r1".to_vec()), Some(&b"deny".to_vec()));
        assert!(r.list_state("rules").is_err(), "a broadcast state is not a list");
        assert!(r.restore_elements("splits", DistributionMode::Union, blob1, &[0]).is_err(), "one mode per state");
        assert!(r.restore_elements("x", DistributionMode::Union, blob1, &[blob1.len() as u64]).is_err());
        let metas = &subtasks[0].1;
        let union = metas.iter().find(|m| m.name == "offsets").unwrap();
        assert_eq!((union.elements, union.bytes), (2, 10));
        assert_eq!(decode_offsets(&encode_offsets(&[1, 2, u64::MAX])).unwrap(), vec![1, 2, u64::MAX]);
        assert!(decode_offsets(&[0; 7]).is_err());
    }
}
