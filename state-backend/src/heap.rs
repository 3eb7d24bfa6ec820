//! The heap keyed backend: hash maps per state. Same behaviour as RocksDB, for small state and tests.
//!
//! Value, reducing and aggregating states map the row key `key_group | key` to the value; list states map it
//! to the concatenated length-prefixed elements (the same bytes RocksDB stores); map states map it to an
//! ordered map of user key to value.
//!
//! A snapshot is one file, `WEIRHP02`: the state count, then per state its name, its kind byte and its rows —
//! `(row key, value)` pairs for value and list kinds, `(row key, entry count, (user key, value)*)` for maps —
//! every number a little-endian `u32` and every byte string length-prefixed. `WEIRHP01` files (value states
//! only, no kind byte) are still read.

use crate::keyed::{
    decode_list, kind_conflict, too_large, wrong_kind, ElementVisitor, KeyedStateBackend, LocalSnapshot, RowKeyBuilder,
    RowVisitor, StateId, StateKind, DEFAULT_MAX_VALUE_BYTES,
};
use crate::StateError;
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::path::Path;
use weir_common::keygroup::KeyGroupRange;

const MAGIC_V1: &[u8; 8] = b"WEIRHP01";
const MAGIC: &[u8; 8] = b"WEIRHP02";
const FILE: &str = "heap-state.bin";

struct HeapState {
    name: String,
    kind: StateKind,
    /// Value and list rows.
    rows: HashMap<Vec<u8>, Vec<u8>>,
    /// Map rows: row key to user key to value.
    maps: HashMap<Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>>,
}

/// Keyed state in memory.
pub struct HeapBackend {
    range: KeyGroupRange,
    row: RowKeyBuilder,
    states: Vec<HeapState>,
    max_value_bytes: usize,
}

fn read_u32(r: &mut impl Read) -> Result<u32, StateError> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b).map_err(|e| StateError::Corrupt(format!("heap snapshot truncated: {e}")))?;
    Ok(u32::from_le_bytes(b))
}

fn read_bytes(r: &mut impl Read) -> Result<Vec<u8>, StateError> {
    let n = read_u32(r)? as usize;
    let mut v = vec![0u8; n];
    r.read_exact(&mut v).map_err(|e| StateError::Corrupt(format!("heap snapshot truncated: {e}")))?;
    Ok(v)
}

fn write_bytes(w: &mut impl Write, b: &[u8]) -> std::io::Result<()> {
    w.write_all(&(b.len() as u32).to_le_bytes())?;
    w.write_all(b)
}

impl HeapBackend {
    /// An empty backend, or one restored from a snapshot directory.
    pub fn open(max_parallelism: u32, range: KeyGroupRange, restore_dir: Option<&Path>) -> Result<Self, StateError> {
        let mut b = HeapBackend {
            range,
            row: RowKeyBuilder::new(max_parallelism),
            states: Vec::new(),
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
        };
        if let Some(dir) = restore_dir {
            let path = dir.join(FILE);
            let data = std::fs::read(&path).map_err(|e| StateError::io(format!("read {}", path.display()), e))?;
            let mut r = data.as_slice();
            let mut magic = [0u8; 8];
            r.read_exact(&mut magic).map_err(|_| StateError::Corrupt("heap snapshot too short".into()))?;
            let v2 = match &magic {
                m if m == MAGIC => true,
                m if m == MAGIC_V1 => false,
                _ => return Err(StateError::Corrupt("not a heap snapshot".into())),
            };
            let n_states = read_u32(&mut r)?;
            for _ in 0..n_states {
                let name = String::from_utf8(read_bytes(&mut r)?).map_err(|e| StateError::Corrupt(e.to_string()))?;
                let kind = if v2 {
                    let mut k = [0u8; 1];
                    r.read_exact(&mut k).map_err(|e| StateError::Corrupt(format!("heap snapshot truncated: {e}")))?;
                    StateKind::from_byte(k[0])?
                } else {
                    StateKind::Value
                };
                let n = read_u32(&mut r)?;
                let mut st = HeapState { name, kind, rows: HashMap::new(), maps: HashMap::new() };
                for _ in 0..n {
                    let k = read_bytes(&mut r)?;
                    if kind == StateKind::Map {
                        let entries = read_u32(&mut r)?;
                        let mut m = BTreeMap::new();
                        for _ in 0..entries {
                            let uk = read_bytes(&mut r)?;
                            m.insert(uk, read_bytes(&mut r)?);
                        }
                        st.maps.insert(k, m);
                    } else {
                        st.rows.insert(k, read_bytes(&mut r)?);
                    }
                }
                b.states.push(st);
            }
        }
        Ok(b)
    }

    fn state(
        &mut self,
        state: StateId,
        op: &str,
        ok: impl Fn(StateKind) -> bool,
    ) -> Result<&mut HeapState, StateError> {
        let st = &mut self.states[state.0];
        if !ok(st.kind) {
            return Err(wrong_kind(&st.name, st.kind, op));
        }
        Ok(st)
    }
}

impl KeyedStateBackend for HeapBackend {
    fn register_state(&mut self, name: &str, kind: StateKind) -> Result<StateId, StateError> {
        if let Some(i) = self.states.iter().position(|s| s.name == name) {
            let existing = self.states[i].kind;
            if existing != kind {
                return Err(kind_conflict(name, existing, kind));
            }
            return Ok(StateId(i));
        }
        self.states.push(HeapState { name: name.to_string(), kind, rows: HashMap::new(), maps: HashMap::new() });
        Ok(StateId(self.states.len() - 1))
    }

    fn set_max_value_bytes(&mut self, limit: usize) {
        self.max_value_bytes = limit;
    }

    fn set_current_key(&mut self, key: &[u8]) {
        self.row.set(key);
    }

    fn get_value(&mut self, state: StateId) -> Result<Option<&[u8]>, StateError> {
        self.state(state, "get_value", StateKind::is_value_row)?;
        Ok(self.states[state.0].rows.get(self.row.row.as_slice()).map(|v| v.as_slice()))
    }

    fn put_value(&mut self, state: StateId, value: &[u8]) -> Result<(), StateError> {
        let limit = self.max_value_bytes;
        let st = self.state(state, "put_value", StateKind::is_value_row)?;
        if value.len() > limit {
            return Err(too_large(&st.name, st.kind, value.len(), limit));
        }
        let map = &mut self.states[state.0].rows;
        match map.get_mut(self.row.row.as_slice()) {
            Some(v) => {
                v.clear();
                v.extend_from_slice(value);
            }
            None => {
                map.insert(self.row.row.clone(), value.to_vec());
            }
        }
        Ok(())
    }

    fn delete_value(&mut self, state: StateId) -> Result<(), StateError> {
        self.state(state, "delete_value", StateKind::is_value_row)?;
        self.states[state.0].rows.remove(self.row.row.as_slice());
        Ok(())
    }

    fn for_each_value(&mut self, state: StateId, f: &mut RowVisitor<'_>) -> Result<(), StateError> {
        self.state(state, "for_each_value", StateKind::is_value_row)?;
        let prefix = self.row.prefix_len;
        // Key-group order, like RocksDB, so both backends emit the same sequence.
        let mut rows: Vec<(&Vec<u8>, &Vec<u8>)> = self.states[state.0].rows.iter().collect();
        rows.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (k, v) in rows {
            f(&k[prefix..], v)?;
        }
        Ok(())
    }

    fn for_each_list_element(&mut self, state: StateId, f: &mut ElementVisitor<'_>) -> Result<(), StateError> {
        let row = &self.row.row;
        let st = &self.states[state.0];
        if st.kind != StateKind::List {
            return Err(wrong_kind(&st.name, st.kind, "list get"));
        }
        match st.rows.get(row.as_slice()) {
            Some(v) => decode_list(&st.name, v, f),
            None => Ok(()),
        }
    }

    fn append_list(&mut self, state: StateId, encoded: &[u8]) -> Result<(), StateError> {
        let limit = self.max_value_bytes;
        let row = &self.row.row;
        let st = &mut self.states[state.0];
        if st.kind != StateKind::List {
            return Err(wrong_kind(&st.name, st.kind, "list add"));
        }
        let old = st.rows.get(row.as_slice()).map_or(0, |v| v.len());
        if old + encoded.len() > limit {
            return Err(too_large(&st.name, st.kind, old + encoded.len(), limit));
        }
        match st.rows.get_mut(row.as_slice()) {
            Some(v) => v.extend_from_slice(encoded),
            None => {
                st.rows.insert(row.clone(), encoded.to_vec());
            }
        }
        Ok(())
    }

    fn replace_list(&mut self, state: StateId, encoded: &[u8]) -> Result<(), StateError> {
        let limit = self.max_value_bytes;
        let row = &self.row.row;
        let st = &mut self.states[state.0];
        if st.kind != StateKind::List {
            return Err(wrong_kind(&st.name, st.kind, "list update"));
        }
        if encoded.len() > limit {
            return Err(too_large(&st.name, st.kind, encoded.len(), limit));
        }
        if encoded.is_empty() {
            st.rows.remove(row.as_slice());
        } else {
            st.rows.insert(row.clone(), encoded.to_vec());
        }
        Ok(())
    }

    fn map_get(&mut self, state: StateId, user_key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        let st = &self.states[state.0];
        if st.kind != StateKind::Map {
            return Err(wrong_kind(&st.name, st.kind, "map get"));
        }
        Ok(st.maps.get(self.row.row.as_slice()).and_then(|m| m.get(user_key)).cloned())
    }

    fn map_put(&mut self, state: StateId, user_key: &[u8], value: &[u8]) -> Result<(), StateError> {
        let limit = self.max_value_bytes;
        let row = &self.row.row;
        let st = &mut self.states[state.0];
        if st.kind != StateKind::Map {
            return Err(wrong_kind(&st.name, st.kind, "map put"));
        }
        if value.len() > limit {
            return Err(too_large(&st.name, st.kind, value.len(), limit));
        }
        match st.maps.get_mut(row.as_slice()) {
            Some(m) => {
                m.insert(user_key.to_vec(), value.to_vec());
            }
            None => {
                st.maps.insert(row.clone(), BTreeMap::from([(user_key.to_vec(), value.to_vec())]));
            }
        }
        Ok(())
    }

    fn map_remove(&mut self, state: StateId, user_key: &[u8]) -> Result<(), StateError> {
        let row = &self.row.row;
        let st = &mut self.states[state.0];
        if st.kind != StateKind::Map {
            return Err(wrong_kind(&st.name, st.kind, "map remove"));
        }
        if let Some(m) = st.maps.get_mut(row.as_slice()) {
            m.remove(user_key);
            if m.is_empty() {
                st.maps.remove(row.as_slice());
            }
        }
        Ok(())
    }

    fn for_each_map_entry(&mut self, state: StateId, f: &mut RowVisitor<'_>) -> Result<(), StateError> {
        let st = &self.states[state.0];
        if st.kind != StateKind::Map {
            return Err(wrong_kind(&st.name, st.kind, "map iteration"));
        }
        if let Some(m) = st.maps.get(self.row.row.as_slice()) {
            for (k, v) in m {
                f(k, v)?;
            }
        }
        Ok(())
    }

    fn map_is_empty(&mut self, state: StateId) -> Result<bool, StateError> {
        let st = &self.states[state.0];
        if st.kind != StateKind::Map {
            return Err(wrong_kind(&st.name, st.kind, "map is_empty"));
        }
        Ok(st.maps.get(self.row.row.as_slice()).is_none_or(|m| m.is_empty()))
    }

    fn clear_key(&mut self, state: StateId) -> Result<(), StateError> {
        let st = &mut self.states[state.0];
        st.rows.remove(self.row.row.as_slice());
        st.maps.remove(self.row.row.as_slice());
        Ok(())
    }

    fn clear_all(&mut self, state: StateId) -> Result<(), StateError> {
        let st = &mut self.states[state.0];
        st.rows.clear();
        st.maps.clear();
        Ok(())
    }

    fn snapshot_sync(&mut self, dir: &Path) -> Result<LocalSnapshot, StateError> {
        std::fs::create_dir_all(dir).map_err(|e| StateError::io(format!("create {}", dir.display()), e))?;
        let path = dir.join(FILE);
        let file = std::fs::File::create(&path).map_err(|e| StateError::io(format!("create {}", path.display()), e))?;
        let mut w = std::io::BufWriter::new(file);
        let io = |e| StateError::io("write heap snapshot", e);
        w.write_all(MAGIC).map_err(io)?;
        w.write_all(&(self.states.len() as u32).to_le_bytes()).map_err(io)?;
        for st in &self.states {
            write_bytes(&mut w, st.name.as_bytes()).map_err(io)?;
            w.write_all(&[st.kind.to_byte()]).map_err(io)?;
            if st.kind == StateKind::Map {
                w.write_all(&(st.maps.len() as u32).to_le_bytes()).map_err(io)?;
                for (k, m) in &st.maps {
                    write_bytes(&mut w, k).map_err(io)?;
                    w.write_all(&(m.len() as u32).to_le_bytes()).map_err(io)?;
                    for (uk, v) in m {
                        write_bytes(&mut w, uk).map_err(io)?;
                        write_bytes(&mut w, v).map_err(io)?;
                    }
                }
            } else {
                w.write_all(&(st.rows.len() as u32).to_le_bytes()).map_err(io)?;
                for (k, v) in &st.rows {
                    write_bytes(&mut w, k).map_err(io)?;
                    write_bytes(&mut w, v).map_err(io)?;
                }
            }
        }
        w.flush().map_err(io)?;
        let size = std::fs::metadata(&path).map_err(io)?.len();
        Ok(LocalSnapshot {
            dir: dir.to_path_buf(),
            files: vec![(FILE.to_string(), size)],
            backend: "heap",
            key_group_range: self.range,
        })
    }

    fn kind(&self) -> &'static str {
        "heap"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyed::ValueState;

    #[test]
    fn snapshot_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        let mut b = HeapBackend::open(128, range, None).unwrap();
        let mut st = ValueState::<u64>::register(&mut b, "c").unwrap();
        for i in 0u64..100 {
            b.set_current_key(&i.to_be_bytes());
            st.update(&mut b, &(i * 2)).unwrap();
        }
        let snap = b.snapshot_sync(&tmp.path().join("s")).unwrap();
        let mut r = HeapBackend::open(128, range, Some(&snap.dir)).unwrap();
        let st2 = ValueState::<u64>::register(&mut r, "c").unwrap();
        r.set_current_key(&21u64.to_be_bytes());
        assert_eq!(st2.value(&mut r).unwrap(), Some(42));
        std::fs::write(snap.dir.join(FILE), b"garbage").unwrap();
        assert!(HeapBackend::open(128, range, Some(&snap.dir)).is_err());
    }

    #[test]
    fn reads_version_1_snapshots_as_value_states() {
        let tmp = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        let mut row = RowKeyBuilder::new(128);
        row.set(b"k");
        let mut file = MAGIC_V1.to_vec();
        file.extend_from_slice(&1u32.to_le_bytes());
        write_bytes(&mut file, b"old").unwrap();
        file.extend_from_slice(&1u32.to_le_bytes());
        write_bytes(&mut file, &row.row).unwrap();
        write_bytes(&mut file, &7u64.to_be_bytes()).unwrap();
        std::fs::write(tmp.path().join(FILE), file).unwrap();
        let mut r = HeapBackend::open(128, range, Some(tmp.path())).unwrap();
        assert!(r.register_state("old", StateKind::List).is_err());
        let st = ValueState::<u64>::register(&mut r, "old").unwrap();
        r.set_current_key(b"k");
        assert_eq!(st.value(&mut r).unwrap(), Some(7));
    }
}
