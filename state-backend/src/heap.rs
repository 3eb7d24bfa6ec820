//! The heap keyed backend: a hash map per state. Same behaviour as RocksDB, for small state and tests.
//! A snapshot is one file: per state, its name and every `(row key, value)` entry, length-prefixed.

use crate::keyed::{KeyedStateBackend, LocalSnapshot, RowKeyBuilder, RowVisitor, StateId};
use crate::StateError;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::Path;
use weir_common::keygroup::KeyGroupRange;

const MAGIC: &[u8; 8] = b"WEIRHP01";
const FILE: &str = "heap-state.bin";

struct HeapState {
    name: String,
    map: HashMap<Vec<u8>, Vec<u8>>,
}

/// Keyed state in memory.
pub struct HeapBackend {
    range: KeyGroupRange,
    row: RowKeyBuilder,
    states: Vec<HeapState>,
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

impl HeapBackend {
    /// An empty backend, or one restored from a snapshot directory.
    pub fn open(max_parallelism: u32, range: KeyGroupRange, restore_dir: Option<&Path>) -> Result<Self, StateError> {
        let mut b = HeapBackend { range, row: RowKeyBuilder::new(max_parallelism), states: Vec::new() };
        if let Some(dir) = restore_dir {
            let path = dir.join(FILE);
            let data = std::fs::read(&path).map_err(|e| StateError::io(format!("read {}", path.display()), e))?;
            let mut r = data.as_slice();
            let mut magic = [0u8; 8];
            r.read_exact(&mut magic).map_err(|_| StateError::Corrupt("heap snapshot too short".into()))?;
            if &magic != MAGIC {
                return Err(StateError::Corrupt("not a heap snapshot".into()));
            }
            let n_states = read_u32(&mut r)?;
            for _ in 0..n_states {
                let name = String::from_utf8(read_bytes(&mut r)?).map_err(|e| StateError::Corrupt(e.to_string()))?;
                let n = read_u32(&mut r)?;
                let mut map = HashMap::with_capacity(n as usize);
                for _ in 0..n {
                    let k = read_bytes(&mut r)?;
                    let v = read_bytes(&mut r)?;
                    map.insert(k, v);
                }
                b.states.push(HeapState { name, map });
            }
        }
        Ok(b)
    }
}

impl KeyedStateBackend for HeapBackend {
    fn register_value_state(&mut self, name: &str) -> Result<StateId, StateError> {
        if let Some(i) = self.states.iter().position(|s| s.name == name) {
            return Ok(StateId(i));
        }
        self.states.push(HeapState { name: name.to_string(), map: HashMap::new() });
        Ok(StateId(self.states.len() - 1))
    }

    fn set_current_key(&mut self, key: &[u8]) {
        self.row.set(key);
    }

    fn get_value(&mut self, state: StateId) -> Result<Option<&[u8]>, StateError> {
        Ok(self.states[state.0].map.get(self.row.row.as_slice()).map(|v| v.as_slice()))
    }

    fn put_value(&mut self, state: StateId, value: &[u8]) -> Result<(), StateError> {
        let map = &mut self.states[state.0].map;
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
        self.states[state.0].map.remove(self.row.row.as_slice());
        Ok(())
    }

    fn for_each_value(&mut self, state: StateId, f: &mut RowVisitor<'_>) -> Result<(), StateError> {
        let prefix = self.row.prefix_len;
        // Key-group order, like RocksDB, so both backends emit the same sequence.
        let mut rows: Vec<(&Vec<u8>, &Vec<u8>)> = self.states[state.0].map.iter().collect();
        rows.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (k, v) in rows {
            f(&k[prefix..], v)?;
        }
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
            w.write_all(&(st.name.len() as u32).to_le_bytes()).map_err(io)?;
            w.write_all(st.name.as_bytes()).map_err(io)?;
            w.write_all(&(st.map.len() as u32).to_le_bytes()).map_err(io)?;
            for (k, v) in &st.map {
                w.write_all(&(k.len() as u32).to_le_bytes()).map_err(io)?;
                w.write_all(k).map_err(io)?;
                w.write_all(&(v.len() as u32).to_le_bytes()).map_err(io)?;
                w.write_all(v).map_err(io)?;
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
}
