//! Operator (non-keyed) state of one subtask: named lists of byte elements (`SPLIT_DISTRIBUTE` list state and
//! `UNION` list state) and broadcast map states. A snapshot is one blob in which each element is a
//! little-endian `u32` length and its bytes, plus, per state, the offset of each element (the
//! [`StateMetaInfo`] the job manager needs to redistribute elements without reading the blob). A broadcast
//! state is one element: its whole map (every subtask holds the same copy).
//!
//! Restore at the same parallelism: list and broadcast states come back as the subtask wrote them; union
//! states are the concatenation of every subtask's union elements ([`OperatorStateStore::restore_with_union`]).

use crate::StateError;
use std::collections::BTreeMap;
use weir_common::checkpoint::{DistributionMode, StateMetaInfo};

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

/// A state's name, distribution mode and elements.
type StateElements = (String, DistributionMode, Vec<Vec<u8>>);

/// The elements of every state in a blob, by name.
fn read_elements(blob: &[u8], metas: &[StateMetaInfo]) -> Result<Vec<StateElements>, StateError> {
    let mut out = Vec::with_capacity(metas.len());
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
        out.push((meta.name.clone(), meta.mode, elems));
    }
    Ok(out)
}

impl OperatorStateStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rebuilds a store from a snapshot blob and its meta info.
    pub fn restore(blob: &[u8], metas: &[StateMetaInfo]) -> Result<Self, StateError> {
        let mut store = OperatorStateStore::default();
        for (name, mode, elems) in read_elements(blob, metas)? {
            match mode {
                DistributionMode::Broadcast => {
                    let map = match elems.first() {
                        Some(e) => decode_map(&name, e)?,
                        None => BTreeMap::new(),
                    };
                    store.broadcast.insert(name, map);
                }
                _ => {
                    store.states.insert(name, (mode, elems));
                }
            }
        }
        Ok(store)
    }

    /// Rebuilds a subtask's store from its own blob, with its union states replaced by the union elements of
    /// every subtask (`union_blobs`, in subtask order, the subtask's own included).
    pub fn restore_with_union(
        blob: &[u8],
        metas: &[StateMetaInfo],
        union_blobs: &[(Vec<u8>, Vec<StateMetaInfo>)],
    ) -> Result<Self, StateError> {
        let mut store = Self::restore(blob, metas)?;
        if union_blobs.is_empty() {
            return Ok(store);
        }
        for (_, (mode, elems)) in store.states.iter_mut() {
            if *mode == DistributionMode::Union {
                elems.clear();
            }
        }
        for (b, m) in union_blobs {
            for (name, mode, elems) in read_elements(b, m)? {
                if mode == DistributionMode::Union {
                    store.states.entry(name).or_insert((mode, Vec::new())).1.extend(elems);
                }
            }
        }
        Ok(store)
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
        for (name, map) in &self.broadcast {
            let offset = blob.len() as u64;
            let e = encode_map(map);
            blob.extend_from_slice(&(e.len() as u32).to_le_bytes());
            blob.extend_from_slice(&e);
            metas.push(StateMetaInfo { name: name.clone(), mode: DistributionMode::Broadcast, offsets: vec![offset] });
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

    #[test]
    fn union_states_are_pooled_and_broadcast_states_round_trip() {
        // Two subtasks with their own list and union elements and the same broadcast state.
        let mut subtasks = Vec::new();
        for i in 0..2u8 {
            let mut s = OperatorStateStore::new();
            s.list_state("splits").unwrap().push(vec![i]);
            s.union_list_state("offsets").unwrap().extend([vec![10 + i], vec![20 + i]]);
            s.broadcast_state("rules").unwrap().insert(b"r1".to_vec(), b"deny".to_vec());
            subtasks.push(s.snapshot());
        }
        let restored = OperatorStateStore::restore_with_union(&subtasks[1].0, &subtasks[1].1, &subtasks).unwrap();
        let mut r = restored.clone();
        assert_eq!(r.list_state("splits").unwrap(), &vec![vec![1u8]], "list state comes back to its own subtask");
        assert_eq!(r.union_list_state("offsets").unwrap(), &vec![vec![10u8], vec![20], vec![11], vec![21]]);
        assert_eq!(r.broadcast_state("rules").unwrap().get(&b"r1".to_vec()), Some(&b"deny".to_vec()));
        assert!(r.list_state("rules").is_err(), "a broadcast state is not a list");
        // Without union sources, a subtask gets only its own union elements back.
        let mut own = OperatorStateStore::restore(&subtasks[0].0, &subtasks[0].1).unwrap();
        assert_eq!(own.union_list_state("offsets").unwrap().len(), 2);
    }
}
