//! The write-back cache in front of RocksDB: rows (`key_group | key` → value) touched since the last flush,
//! kept compactly so that a whole subtask's working set fits. Keys and values live in one byte arena; an
//! entry is 20 bytes of metadata plus a 4-byte slot in an index hash table — about 45 bytes for a 9-byte key
//! and an 8-byte value, against ~180 for a `HashMap<Vec<u8>, Vec<u8>>`.

use hashbrown::HashTable;
use std::hash::BuildHasher;

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Meta {
    key_off: u32,
    key_len: u32,
    val_off: u32,
    /// Length of the value, or [`NONE`] for a row known to be absent (or deleted).
    val_len: u32,
    /// Bytes reserved for the value in the arena, so a value that does not grow is overwritten in place.
    val_cap: u32,
    dirty: bool,
}

/// A cache lookup.
#[derive(Debug, PartialEq, Eq)]
pub enum Cached<'a> {
    /// The row is not cached: ask RocksDB.
    Miss,
    /// The row is cached: its value, or `None` if it has none.
    Hit(Option<&'a [u8]>),
}

/// Rows of one state, with dirty tracking.
pub struct RowCache {
    index: HashTable<u32>,
    metas: Vec<Meta>,
    arena: Vec<u8>,
    hasher: hashbrown::DefaultHashBuilder,
}

impl Default for RowCache {
    fn default() -> Self {
        RowCache { index: HashTable::new(), metas: Vec::new(), arena: Vec::new(), hasher: Default::default() }
    }
}

impl RowCache {
    fn key_of<'a>(metas: &[Meta], arena: &'a [u8], i: u32) -> &'a [u8] {
        let m = &metas[i as usize];
        &arena[m.key_off as usize..(m.key_off + m.key_len) as usize]
    }

    fn find(&self, key: &[u8]) -> Option<u32> {
        let h = self.hasher.hash_one(key);
        self.index.find(h, |&i| Self::key_of(&self.metas, &self.arena, i) == key).copied()
    }

    /// The cached value of a row.
    pub fn get(&self, key: &[u8]) -> Cached<'_> {
        match self.find(key) {
            None => Cached::Miss,
            Some(i) => {
                let m = &self.metas[i as usize];
                if m.val_len == NONE {
                    Cached::Hit(None)
                } else {
                    Cached::Hit(Some(&self.arena[m.val_off as usize..(m.val_off + m.val_len) as usize]))
                }
            }
        }
    }

    fn append(&mut self, bytes: &[u8]) -> u32 {
        let off = self.arena.len() as u32;
        self.arena.extend_from_slice(bytes);
        off
    }

    fn set(&mut self, key: &[u8], value: Option<&[u8]>, dirty: bool) {
        match self.find(key) {
            Some(i) => {
                let m = self.metas[i as usize];
                let (val_off, val_len, val_cap) = match value {
                    None => (m.val_off, NONE, m.val_cap),
                    Some(v) if v.len() as u32 <= m.val_cap => {
                        self.arena[m.val_off as usize..m.val_off as usize + v.len()].copy_from_slice(v);
                        (m.val_off, v.len() as u32, m.val_cap)
                    }
                    Some(v) => (self.append(v), v.len() as u32, v.len() as u32),
                };
                let m = &mut self.metas[i as usize];
                m.val_off = val_off;
                m.val_len = val_len;
                m.val_cap = val_cap;
                m.dirty |= dirty;
            }
            None => {
                let key_off = self.append(key);
                let (val_off, val_len, val_cap) = match value {
                    None => (0, NONE, 0),
                    Some(v) => (self.append(v), v.len() as u32, v.len() as u32),
                };
                let i = self.metas.len() as u32;
                self.metas.push(Meta { key_off, key_len: key.len() as u32, val_off, val_len, val_cap, dirty });
                let h = self.hasher.hash_one(key);
                let (metas, arena, hasher) = (&self.metas, &self.arena, &self.hasher);
                self.index.insert_unique(h, i, |&j| hasher.hash_one(Self::key_of(metas, arena, j)));
            }
        }
    }

    /// Caches a row as read from RocksDB (clean).
    pub fn insert_clean(&mut self, key: &[u8], value: Option<&[u8]>) {
        self.set(key, value, false);
    }

    /// Writes a row (dirty until the next [`RowCache::drain_dirty`]).
    pub fn put(&mut self, key: &[u8], value: &[u8]) {
        self.set(key, Some(value), true);
    }

    /// Deletes a row (a dirty tombstone until the next [`RowCache::drain_dirty`]).
    pub fn delete(&mut self, key: &[u8]) {
        self.set(key, None, true);
    }

    /// Calls `f(key, value)` for every dirty row (`None` = delete) and marks them clean.
    pub fn drain_dirty(&mut self, mut f: impl FnMut(&[u8], Option<&[u8]>)) {
        for m in self.metas.iter_mut().filter(|m| m.dirty) {
            let key = &self.arena[m.key_off as usize..(m.key_off + m.key_len) as usize];
            let value = (m.val_len != NONE).then(|| &self.arena[m.val_off as usize..(m.val_off + m.val_len) as usize]);
            f(key, value);
            m.dirty = false;
        }
    }

    /// The dirty rows (as indexes for [`RowCache::row`]), sorted by key.
    pub fn dirty_sorted(&self) -> Vec<u32> {
        let mut rows: Vec<u32> = (0..self.metas.len() as u32).filter(|&i| self.metas[i as usize].dirty).collect();
        rows.sort_unstable_by(|&a, &b| {
            Self::key_of(&self.metas, &self.arena, a).cmp(Self::key_of(&self.metas, &self.arena, b))
        });
        rows
    }

    /// The key and value (`None`: deleted) of row `i`.
    pub fn row(&self, i: u32) -> (&[u8], Option<&[u8]>) {
        let m = &self.metas[i as usize];
        let value = (m.val_len != NONE).then(|| &self.arena[m.val_off as usize..(m.val_off + m.val_len) as usize]);
        (Self::key_of(&self.metas, &self.arena, i), value)
    }

    /// Marks rows clean (once they are written).
    pub fn mark_clean(&mut self, rows: &[u32]) {
        for &i in rows {
            self.metas[i as usize].dirty = false;
        }
    }

    /// Forgets every row (call after [`RowCache::drain_dirty`]).
    pub fn clear(&mut self) {
        *self = RowCache { hasher: self.hasher.clone(), ..Default::default() };
    }

    /// Number of cached rows.
    pub fn len(&self) -> usize {
        self.metas.len()
    }

    /// Whether no row is cached.
    pub fn is_empty(&self) -> bool {
        self.metas.is_empty()
    }

    /// Bytes the cache holds, including spare capacity.
    pub fn memory_bytes(&self) -> usize {
        self.arena.capacity() + self.metas.capacity() * std::mem::size_of::<Meta>() + self.index.capacity() * 5
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_writes_and_dirty_tracking() {
        let mut c = RowCache::default();
        assert_eq!(c.get(b"a"), Cached::Miss);
        c.insert_clean(b"a", None);
        assert_eq!(c.get(b"a"), Cached::Hit(None));
        c.put(b"a", b"12345678");
        c.put(b"a", b"1234"); // shrinks in place
        c.insert_clean(b"b", Some(b"x"));
        c.put(b"b", b"longer value"); // grows: moves
        c.insert_clean(b"c", Some(b"keep"));
        c.delete(b"c");
        assert_eq!(c.get(b"a"), Cached::Hit(Some(&b"1234"[..])));
        assert_eq!(c.get(b"b"), Cached::Hit(Some(&b"longer value"[..])));
        let mut dirty = Vec::new();
        c.drain_dirty(|k, v| dirty.push((k.to_vec(), v.map(|v| v.to_vec()))));
        dirty.sort();
        assert_eq!(
            dirty,
            vec![
                (b"a".to_vec(), Some(b"1234".to_vec())),
                (b"b".to_vec(), Some(b"longer value".to_vec())),
                (b"c".to_vec(), None)
            ]
        );
        let mut again = 0;
        c.drain_dirty(|_, _| again += 1);
        assert_eq!(again, 0, "drained rows are clean");
        assert_eq!(c.len(), 3);
        c.clear();
        assert!(c.is_empty());
        assert_eq!(c.get(b"a"), Cached::Miss);
    }

    #[test]
    fn dirty_rows_sorted_then_marked_clean() {
        let mut c = RowCache::default();
        c.put(b"c", b"3");
        c.insert_clean(b"b", Some(b"2"));
        c.put(b"a", b"1");
        c.delete(b"d");
        let rows = c.dirty_sorted();
        let seen: Vec<_> = rows.iter().map(|&i| c.row(i)).collect();
        assert_eq!(seen, [(&b"a"[..], Some(&b"1"[..])), (&b"c"[..], Some(&b"3"[..])), (&b"d"[..], None)]);
        c.mark_clean(&rows);
        assert!(c.dirty_sorted().is_empty());
        assert_eq!(c.get(b"c"), Cached::Hit(Some(&b"3"[..])));
    }

    #[test]
    fn many_rows_survive_index_growth() {
        let mut c = RowCache::default();
        for i in 0u64..100_000 {
            c.put(&i.to_be_bytes(), &(i * 3).to_be_bytes());
        }
        for i in (0u64..100_000).step_by(997) {
            assert_eq!(c.get(&i.to_be_bytes()), Cached::Hit(Some(&(i * 3).to_be_bytes()[..])));
        }
        assert!(c.memory_bytes() < 100_000 * 60, "{} bytes", c.memory_bytes());
    }
}
