//! Operator (non-keyed) state of one subtask: named lists of byte elements. A snapshot is one blob in which
//! each element is a little-endian `u32` length and its bytes, plus, per state, the offset of each element
//! (the [`StateMetaInfo`] the job manager needs to redistribute elements without reading the blob).

use crate::StateError;
use std::collections::BTreeMap;
use weir_common::checkpoint::{DistributionMode, StateMetaInfo};

/// The operator states of one subtask.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OperatorStateStore {
    states: BTreeMap<String, (DistributionMode, Vec<Vec<u8>>)>,
}

impl OperatorStateStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rebuilds a store from a snapshot blob and its meta info.
    pub fn restore(blob: &[u8], metas: &[StateMetaInfo]) -> Result<Self, StateError> {
        let mut states = BTreeMap::new();
        for meta in metas {
            let mut elems = Vec::with_capacity(meta.offsets.len());
            for &off in &meta.offsets {
                let off = off as usize;
                let len_bytes = blob.get(off..off + 4).ok_or_else(|| {
                    StateError::Corrupt(format!("operator state {:?}: offset {off} out of range", meta.name))
                })?;
                let len = u32::from_le_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]) as usize;
                let body = blob.get(off + 4..off + 4 + len).ok_or_else(|| {
                    StateError::Corrupt(format!("operator state {:?}: element at {off} truncated", meta.name))
                })?;
                elems.push(body.to_vec());
            }
            states.insert(meta.name.clone(), (meta.mode, elems));
        }
        Ok(OperatorStateStore { states })
    }

    fn state(&mut self, name: &str, mode: DistributionMode) -> Result<&mut Vec<Vec<u8>>, StateError> {
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

    /// Whether no state holds any element.
    pub fn is_empty(&self) -> bool {
        self.states.values().all(|(_, v)| v.is_empty())
    }

    /// Serializes every state into one blob plus per-state element offsets.
    pub fn snapshot(&self) -> (Vec<u8>, Vec<StateMetaInfo>) {
        let mut blob = Vec::new();
        let mut metas = Vec::with_capacity(self.states.len());
        for (name, (mode, elems)) in &self.states {
            let mut offsets = Vec::with_capacity(elems.len());
            for e in elems {
                offsets.push(blob.len() as u64);
                blob.extend_from_slice(&(e.len() as u32).to_le_bytes());
                blob.extend_from_slice(e);
            }
            metas.push(StateMetaInfo { name: name.clone(), mode: *mode, offsets });
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
        assert_eq!(metas[0].offsets, vec![0, 5]);
        let mut r = OperatorStateStore::restore(&blob, &metas).unwrap();
        assert_eq!(r, s);
        assert!(r.union_list_state("splits").is_err());
        assert!(OperatorStateStore::restore(&blob[..6], &metas).is_err());
    }
}
