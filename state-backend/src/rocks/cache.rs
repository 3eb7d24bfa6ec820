//! The write-back cache in front of RocksDB: rows (`key_group | key` → value) touched since the last flush,
//! kept compactly so that a whole subtask's working set fits. An entry is 36 bytes of metadata plus a 4-byte
//! slot in an index hash table; keys of up to [`INLINE_KEY`] bytes and values of up to [`INLINE_VALUE`] bytes
//! sit in the entry itself, longer ones in one byte arena — about 42 bytes for a 9-byte key and an 8-byte
//! value, against ~180 for a `HashMap<Vec<u8>, Vec<u8>>`.
//!
//! A namespaced state's rows are longer (`key_group | key | namespace | u32 length`: 22 bytes for an 8-byte
//! key and a window slice), so its cache ([`StateCache::for_rows`]) holds keys of up to
//! [`INLINE_NAMESPACED_KEY`] bytes in 48-byte entries: with them in the arena Nexmark q5's window counts spent
//! a third of their time in cache lookups (inline, 18 % more events per CPU-second), while the keyed count,
//! whose keys fit 12 bytes, is 6 % slower with entries that large.
//!
//! Inline keys and values are for speed as much as for size: a working set of millions of rows does not fit
//! the CPU caches, so a lookup costs its memory accesses. With both inline a hit reads the index slot and the
//! entry, and nothing else (a key in the arena would be a third access, its value often a fourth).

use hashbrown::HashTable;
use std::hash::BuildHasher;

const NONE: u32 = u32::MAX;
/// `val_cap` of a value held in the entry.
const INLINE: u32 = u32::MAX - 1;
/// Longest key held in the entry.
const INLINE_KEY: usize = 12;
/// Longest key held in the entry of a namespaced state's cache (fills the 48-byte entry's padding).
const INLINE_NAMESPACED_KEY: usize = 27;
/// Longest value held in the entry.
const INLINE_VALUE: usize = 8;
/// Flag: the row was written since the last flush.
const DIRTY: u8 = 1;
/// Flag: RocksDB may hold the row (with a value). A row that does not have it is deleted by forgetting it:
/// no tombstone, and no entry left behind for a window slice that is gone.
const STORED: u8 = 2;
/// Flags of a slot on the free list (no row).
const FREE: u8 = 4;

/// One cached row (36 bytes with `K` = 12): a key or value too long for the entry leaves its offset in the
/// arena where the inline bytes would be.
#[derive(Clone, Copy)]
struct Meta<const K: usize> {
    key_len: u32,
    /// Length of the value, or [`NONE`] for a row known to be absent (or deleted).
    val_len: u32,
    /// Bytes reserved for the value in the arena, so a value that does not grow is overwritten in place; or
    /// [`INLINE`].
    val_cap: u32,
    /// [`DIRTY`] and [`STORED`], or [`FREE`] for a slot on the free list.
    flags: u8,
    /// The key, or for a longer one its offset in the arena (first 4 bytes).
    key: [u8; K],
    /// The value, or for one in the arena its offset there (first 4 bytes).
    value: [u8; INLINE_VALUE],
}

const _: () = assert!(std::mem::size_of::<Meta<INLINE_KEY>>() == 36);
const _: () = assert!(std::mem::size_of::<Meta<INLINE_NAMESPACED_KEY>>() == 48);

fn offset_in(bytes: &[u8]) -> usize {
    u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize
}

impl<const K: usize> Meta<K> {
    fn dirty(&self) -> bool {
        self.flags & DIRTY != 0
    }

    fn key<'a>(&'a self, arena: &'a [u8]) -> &'a [u8] {
        match self.key_len as usize {
            n if n <= K => &self.key[..n],
            n => &arena[offset_in(&self.key)..offset_in(&self.key) + n],
        }
    }

    fn val_off(&self) -> u32 {
        offset_in(&self.value) as u32
    }

    fn set_val_off(&mut self, off: u32) {
        self.value[..4].copy_from_slice(&off.to_le_bytes());
    }

    fn value<'a>(&'a self, arena: &'a [u8]) -> Option<&'a [u8]> {
        match (self.val_len, self.val_cap) {
            (NONE, _) => None,
            (n, INLINE) => Some(&self.value[..n as usize]),
            (n, _) => Some(&arena[self.val_off() as usize..self.val_off() as usize + n as usize]),
        }
    }

    /// Holds `v` in the entry, if it fits.
    fn set_inline(&mut self, v: &[u8]) -> bool {
        if v.len() > INLINE_VALUE {
            return false;
        }
        self.value[..v.len()].copy_from_slice(v);
        self.val_len = v.len() as u32;
        self.val_cap = INLINE;
        true
    }
}

/// A cache lookup.
#[derive(Debug, PartialEq, Eq)]
pub enum Cached<'a> {
    /// The row is not cached: ask RocksDB.
    Miss,
    /// The row is cached: its value, or `None` if it has none.
    Hit(Option<&'a [u8]>),
}

/// Rows of one state, with dirty tracking; keys of up to `K` bytes held in the entry.
pub struct RowCache<const K: usize = INLINE_KEY> {
    index: HashTable<u32>,
    metas: Vec<Meta<K>>,
    /// Slots of `metas` whose rows were forgotten, for new rows to reuse.
    free: Vec<u32>,
    arena: Vec<u8>,
    hasher: hashbrown::DefaultHashBuilder,
    /// Whether every row RocksDB holds is cached, so that a row not cached is absent there: true for a state
    /// new to its database until [`RowCache::evict_all`] drops rows RocksDB may hold. A complete cache's miss
    /// needs no RocksDB read, and its rows RocksDB does not hold are forgotten when deleted.
    complete: bool,
}

impl<const K: usize> Default for RowCache<K> {
    fn default() -> Self {
        RowCache {
            index: HashTable::new(),
            metas: Vec::new(),
            free: Vec::new(),
            arena: Vec::new(),
            hasher: Default::default(),
            complete: false,
        }
    }
}

impl<const K: usize> RowCache<K> {
    fn key_of<'a>(metas: &'a [Meta<K>], arena: &'a [u8], i: u32) -> &'a [u8] {
        metas[i as usize].key(arena)
    }

    fn find(&self, key: &[u8]) -> Option<u32> {
        self.find_hashed(key).1
    }

    /// The key's hash and its row, if cached.
    fn find_hashed(&self, key: &[u8]) -> (u64, Option<u32>) {
        let h = self.hasher.hash_one(key);
        (h, self.index.find(h, |&i| Self::key_of(&self.metas, &self.arena, i) == key).copied())
    }

    /// Whether every row RocksDB holds is cached (a miss is an absent row).
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// The cached value of a row.
    pub fn get(&self, key: &[u8]) -> Cached<'_> {
        match self.find(key) {
            None => Cached::Miss,
            Some(i) => Cached::Hit(self.metas[i as usize].value(&self.arena)),
        }
    }

    fn append(&mut self, bytes: &[u8]) -> u32 {
        let off = self.arena.len() as u32;
        self.arena.extend_from_slice(bytes);
        off
    }

    /// Sets a row's value; `flags` are added to an existing row's, and are a new row's.
    fn set(&mut self, key: &[u8], value: Option<&[u8]>, flags: u8) {
        match self.find(key) {
            Some(i) => {
                let m = self.metas[i as usize];
                // `None`: the value goes into the entry; else its place in the arena (a deletion keeps the
                // room it had, wherever it was).
                let place = match value {
                    None => Some((None, NONE, m.val_cap)),
                    Some(v) if v.len() <= INLINE_VALUE => None,
                    Some(v) if m.val_cap != INLINE && v.len() as u32 <= m.val_cap => {
                        let off = m.val_off() as usize;
                        self.arena[off..off + v.len()].copy_from_slice(v);
                        Some((None, v.len() as u32, m.val_cap))
                    }
                    Some(v) => Some((Some(self.append(v)), v.len() as u32, v.len() as u32)),
                };
                let m = &mut self.metas[i as usize];
                match (place, value) {
                    (Some((val_off, val_len, val_cap)), _) => {
                        if let Some(off) = val_off {
                            m.set_val_off(off);
                        }
                        m.val_len = val_len;
                        m.val_cap = val_cap;
                    }
                    (None, Some(v)) => {
                        m.set_inline(v);
                    }
                    (None, None) => {}
                }
                m.flags |= flags;
            }
            None => {
                let mut m = Meta {
                    key_len: key.len() as u32,
                    val_len: NONE,
                    val_cap: 0,
                    flags,
                    key: [0; K],
                    value: [0; INLINE_VALUE],
                };
                if key.len() <= K {
                    m.key[..key.len()].copy_from_slice(key);
                } else {
                    let off = self.append(key);
                    m.key[..4].copy_from_slice(&off.to_le_bytes());
                }
                if let Some(v) = value {
                    if !m.set_inline(v) {
                        let off = self.append(v);
                        m.set_val_off(off);
                        m.val_len = v.len() as u32;
                        m.val_cap = v.len() as u32;
                    }
                }
                let i = match self.free.pop() {
                    Some(i) => {
                        self.metas[i as usize] = m;
                        i
                    }
                    None => {
                        self.metas.push(m);
                        self.metas.len() as u32 - 1
                    }
                };
                let h = self.hasher.hash_one(key);
                let (metas, arena, hasher) = (&self.metas, &self.arena, &self.hasher);
                self.index.insert_unique(h, i, |&j| hasher.hash_one(Self::key_of(metas, arena, j)));
            }
        }
    }

    /// Caches a row as read from RocksDB (clean).
    pub fn insert_clean(&mut self, key: &[u8], value: Option<&[u8]>) {
        self.set(key, value, if value.is_some() { STORED } else { 0 });
    }

    /// Writes a row (dirty until the next [`RowCache::drain_dirty`]). A new row of a complete cache is one
    /// RocksDB does not hold.
    pub fn put(&mut self, key: &[u8], value: &[u8]) {
        self.set(key, Some(value), if self.complete { DIRTY } else { DIRTY | STORED });
    }

    /// Forgets row `i`: its slot goes to the free list (its bytes in the arena, if any, until the next
    /// rebuild).
    fn forget(&mut self, i: u32, hash: u64) {
        if let Ok(entry) = self.index.find_entry(hash, |&j| j == i) {
            entry.remove();
        }
        let m = &mut self.metas[i as usize];
        m.flags = FREE;
        m.val_len = NONE;
        self.free.push(i);
    }

    /// Deletes a row (a dirty tombstone until the next [`RowCache::drain_dirty`]). A row RocksDB does not hold
    /// (read as absent, or written only since) needs no tombstone: it becomes a clean absent row, or in a
    /// complete cache it is forgotten, so that a window's slices, deleted as soon as their last window fires,
    /// leave nothing behind.
    pub fn delete(&mut self, key: &[u8]) {
        let complete = self.complete;
        match self.find_hashed(key) {
            (h, Some(i)) if self.metas[i as usize].flags & STORED == 0 => match complete {
                true => self.forget(i, h),
                false => {
                    let m = &mut self.metas[i as usize];
                    m.val_len = NONE;
                    m.flags = 0;
                }
            },
            (_, Some(_)) => self.set(key, None, DIRTY),
            (_, None) if complete => {}
            (_, None) => self.set(key, None, DIRTY | STORED),
        }
    }

    /// Marks row `i` clean once written: RocksDB now holds it, or (written as a tombstone) no longer does; a
    /// tombstone is then forgotten if the cache is complete, where a miss says as much.
    fn written(&mut self, i: u32) {
        let m = &mut self.metas[i as usize];
        if m.val_len != NONE {
            m.flags = STORED;
            return;
        }
        m.flags = 0;
        if self.complete {
            let h = self.hasher.hash_one(self.metas[i as usize].key(&self.arena));
            self.forget(i, h);
        }
    }

    /// Calls `f(key, value)` for every dirty row (`None` = delete) and marks them clean.
    pub fn drain_dirty(&mut self, mut f: impl FnMut(&[u8], Option<&[u8]>)) {
        for i in 0..self.metas.len() as u32 {
            let m = &self.metas[i as usize];
            if m.dirty() {
                f(m.key(&self.arena), m.value(&self.arena));
                self.written(i);
            }
        }
    }

    /// The dirty rows (as indexes for [`RowCache::row`]), sorted by key.
    pub fn dirty_sorted(&self) -> Vec<u32> {
        let mut rows: Vec<u32> = (0..self.metas.len() as u32).filter(|&i| self.metas[i as usize].dirty()).collect();
        rows.sort_unstable_by(|&a, &b| {
            Self::key_of(&self.metas, &self.arena, a).cmp(Self::key_of(&self.metas, &self.arena, b))
        });
        rows
    }

    /// The key and value (`None`: deleted) of row `i`.
    pub fn row(&self, i: u32) -> (&[u8], Option<&[u8]>) {
        let m = &self.metas[i as usize];
        (m.key(&self.arena), m.value(&self.arena))
    }

    /// Marks rows clean (once they are written).
    pub fn mark_clean(&mut self, rows: &[u32]) {
        for &i in rows {
            self.written(i);
        }
    }

    /// Forgets every row, which RocksDB no longer holds either (the state was cleared): a complete cache stays
    /// complete.
    pub fn clear(&mut self) {
        *self = RowCache { hasher: self.hasher.clone(), complete: self.complete, ..Default::default() };
    }

    /// Forgets every row (call after [`RowCache::drain_dirty`]): RocksDB holds those that were written, so the
    /// cache is no longer complete.
    pub fn evict_all(&mut self) {
        *self = RowCache { hasher: self.hasher.clone(), ..Default::default() };
    }

    /// Forgets the rows known to be absent (deleted, or read as absent), keeping the others: they are what the
    /// next reads want, where a window's cleaned-up slices are not. Call after [`RowCache::drain_dirty`] (a
    /// deletion not written yet would be lost).
    pub fn retain_present(&mut self) {
        let mut kept = RowCache { hasher: self.hasher.clone(), complete: self.complete, ..Default::default() };
        let live = self.metas.iter().filter(|m| m.val_len != NONE).count();
        kept.metas.reserve_exact(live);
        for m in &self.metas {
            if let Some(v) = m.value(&self.arena) {
                kept.set(m.key(&self.arena), Some(v), m.flags);
            }
        }
        *self = kept;
    }

    /// Number of cached rows.
    pub fn len(&self) -> usize {
        self.metas.len() - self.free.len()
    }

    /// Whether no row is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the cache holds, including spare capacity.
    pub fn memory_bytes(&self) -> usize {
        self.arena.capacity() + self.metas.capacity() * std::mem::size_of::<Meta<K>>() + self.index.capacity() * 5
    }
}

/// The cache of one state: entries sized for its rows' keys.
pub enum StateCache {
    /// Rows of a state without namespaces.
    Plain(RowCache<INLINE_KEY>),
    /// Rows of a namespaced state.
    Namespaced(RowCache<INLINE_NAMESPACED_KEY>),
}

/// Runs `$body` on the cache inside, whichever size its entries are.
macro_rules! each {
    ($self:expr, $c:ident => $body:expr) => {
        match $self {
            StateCache::Plain($c) => $body,
            StateCache::Namespaced($c) => $body,
        }
    };
}

impl StateCache {
    /// An empty cache for a state's rows (`namespaced`: scoped to namespaces; `complete`: a state new to its
    /// database, which holds none of its rows).
    pub fn for_rows(namespaced: bool, complete: bool) -> Self {
        match namespaced {
            false => StateCache::Plain(RowCache { complete, ..Default::default() }),
            true => StateCache::Namespaced(RowCache { complete, ..Default::default() }),
        }
    }

    /// [`RowCache::is_complete`].
    pub fn is_complete(&self) -> bool {
        each!(self, c => c.is_complete())
    }

    /// [`RowCache::get`].
    pub fn get(&self, key: &[u8]) -> Cached<'_> {
        each!(self, c => c.get(key))
    }

    /// [`RowCache::insert_clean`].
    pub fn insert_clean(&mut self, key: &[u8], value: Option<&[u8]>) {
        each!(self, c => c.insert_clean(key, value))
    }

    /// [`RowCache::put`].
    pub fn put(&mut self, key: &[u8], value: &[u8]) {
        each!(self, c => c.put(key, value))
    }

    /// [`RowCache::delete`].
    pub fn delete(&mut self, key: &[u8]) {
        each!(self, c => c.delete(key))
    }

    /// [`RowCache::drain_dirty`].
    pub fn drain_dirty(&mut self, f: impl FnMut(&[u8], Option<&[u8]>)) {
        each!(self, c => c.drain_dirty(f))
    }

    /// [`RowCache::dirty_sorted`].
    pub fn dirty_sorted(&self) -> Vec<u32> {
        each!(self, c => c.dirty_sorted())
    }

    /// [`RowCache::row`].
    pub fn row(&self, i: u32) -> (&[u8], Option<&[u8]>) {
        each!(self, c => c.row(i))
    }

    /// [`RowCache::mark_clean`].
    pub fn mark_clean(&mut self, rows: &[u32]) {
        each!(self, c => c.mark_clean(rows))
    }

    /// [`RowCache::clear`].
    pub fn clear(&mut self) {
        each!(self, c => c.clear())
    }

    /// [`RowCache::evict_all`].
    pub fn evict_all(&mut self) {
        each!(self, c => c.evict_all())
    }

    /// [`RowCache::retain_present`].
    pub fn retain_present(&mut self) {
        each!(self, c => c.retain_present())
    }

    /// [`RowCache::len`].
    pub fn len(&self) -> usize {
        each!(self, c => c.len())
    }

    /// [`RowCache::is_empty`].
    pub fn is_empty(&self) -> bool {
        each!(self, c => c.is_empty())
    }

    /// [`RowCache::memory_bytes`].
    pub fn memory_bytes(&self) -> usize {
        each!(self, c => c.memory_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deleting_a_row_read_as_absent_writes_no_tombstone() {
        let mut c = RowCache::<INLINE_KEY>::default();
        c.insert_clean(b"gone", None);
        c.delete(b"gone");
        c.delete(b"never read");
        c.insert_clean(b"kept", Some(b"v"));
        c.delete(b"kept");
        c.put(b"written", b"v");
        c.delete(b"written");
        let mut dirty = Vec::new();
        c.drain_dirty(|k, v| dirty.push((k.to_vec(), v.is_some())));
        dirty.sort();
        assert_eq!(
            dirty,
            vec![(b"kept".to_vec(), false), (b"never read".to_vec(), false), (b"written".to_vec(), false)],
            "only rows RocksDB may hold get a tombstone"
        );
        assert_eq!(c.get(b"gone"), Cached::Hit(None));
        // Once flushed, a tombstone is clean and absent: deleting it again writes nothing.
        c.delete(b"kept");
        let mut again = 0;
        c.drain_dirty(|_, _| again += 1);
        assert_eq!(again, 0);
    }

    #[test]
    fn reads_writes_and_dirty_tracking() {
        let mut c = RowCache::<INLINE_KEY>::default();
        assert_eq!(c.get(b"a"), Cached::Miss);
        c.insert_clean(b"a", None);
        assert_eq!(c.get(b"a"), Cached::Hit(None));
        c.put(b"a", b"12345678");
        c.put(b"a", b"1234"); // shrinks in place
        c.insert_clean(b"b", Some(b"x"));
        c.put(b"b", b"longer value"); // grows: moves
        c.insert_clean(b"c", Some(b"keep"));
        c.delete(b"c");
        // Long keys and values live in the arena, and a value moves between the entry and the arena as it
        // grows and shrinks.
        let long_key = b"a key longer than twelve bytes";
        c.put(long_key, b"short");
        c.put(long_key, b"a value longer than eight");
        assert_eq!(c.get(long_key), Cached::Hit(Some(&b"a value longer than eight"[..])));
        c.put(long_key, b"tiny");
        assert_eq!(c.get(long_key), Cached::Hit(Some(&b"tiny"[..])));
        c.put(long_key, b"long again, long again");
        c.delete(long_key);
        assert_eq!(c.get(long_key), Cached::Hit(None));
        c.put(long_key, b"back");
        assert_eq!(c.get(b"a"), Cached::Hit(Some(&b"1234"[..])));
        assert_eq!(c.get(b"b"), Cached::Hit(Some(&b"longer value"[..])));
        let mut dirty = Vec::new();
        c.drain_dirty(|k, v| dirty.push((k.to_vec(), v.map(|v| v.to_vec()))));
        dirty.sort();
        assert_eq!(
            dirty,
            vec![
                (b"a".to_vec(), Some(b"1234".to_vec())),
                (long_key.to_vec(), Some(b"back".to_vec())),
                (b"b".to_vec(), Some(b"longer value".to_vec())),
                (b"c".to_vec(), None)
            ]
        );
        let mut again = 0;
        c.drain_dirty(|_, _| again += 1);
        assert_eq!(again, 0, "drained rows are clean");
        assert_eq!(c.len(), 4);
        c.clear();
        assert!(c.is_empty());
        assert_eq!(c.get(b"a"), Cached::Miss);
    }

    #[test]
    fn retaining_present_rows_forgets_absent_ones_and_keeps_the_rest_as_they_were() {
        for namespaced in [false, true] {
            let mut c = StateCache::for_rows(namespaced, false);
            let long = vec![7u8; 40];
            c.put(b"live", b"1");
            c.put(&long, &[9; 30]);
            c.insert_clean(b"read-absent", None);
            c.put(b"gone", b"2");
            c.delete(b"gone");
            c.drain_dirty(|_, _| {});
            c.put(b"dirty", b"3");
            let before = c.memory_bytes();
            c.retain_present();
            assert_eq!(c.get(b"live"), Cached::Hit(Some(&b"1"[..])));
            assert_eq!(c.get(&long), Cached::Hit(Some(&[9u8; 30][..])));
            assert_eq!(c.get(b"read-absent"), Cached::Miss);
            assert_eq!(c.get(b"gone"), Cached::Miss);
            let mut dirty = Vec::new();
            c.drain_dirty(|k, v| dirty.push((k.to_vec(), v.map(<[u8]>::to_vec))));
            assert_eq!(dirty, vec![(b"dirty".to_vec(), Some(b"3".to_vec()))], "a dirty row stays dirty");
            assert!(c.memory_bytes() <= before);
        }
    }

    #[test]
    fn dirty_rows_sorted_then_marked_clean() {
        let mut c = RowCache::<INLINE_KEY>::default();
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

    /// Random puts, deletes and clean inserts of keys and values of every length around the inline limits,
    /// against a map: every read and the dirty rows agree.
    #[test]
    fn agrees_with_a_map_across_inline_and_arena_rows() {
        for namespaced in [false, true] {
            agrees_with_a_map(StateCache::for_rows(namespaced, false));
        }
    }

    /// Random reads, writes and deletes of keys up to 35 bytes long (inline and in the arena for either entry
    /// size) agree with a map, and the dirty rows drained are those written.
    fn agrees_with_a_map(mut c: StateCache) {
        use std::collections::BTreeMap;
        let mut model: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        let mut dirty: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |n: u64| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % n
        };
        for step in 0..20_000 {
            let key: Vec<u8> = vec![(next(40)) as u8; next(36) as usize];
            let value: Vec<u8> = vec![step as u8; next(20) as usize];
            match next(4) {
                0 => {
                    c.delete(&key);
                    model.insert(key.clone(), None);
                    dirty.insert(key, None);
                }
                1 if !model.contains_key(&key) => {
                    c.insert_clean(&key, Some(&value));
                    model.insert(key, Some(value));
                }
                _ => {
                    c.put(&key, &value);
                    model.insert(key.clone(), Some(value.clone()));
                    dirty.insert(key, Some(value));
                }
            }
        }
        for (k, v) in &model {
            assert_eq!(c.get(k), Cached::Hit(v.as_deref()), "key {k:?}");
        }
        let mut drained = BTreeMap::new();
        c.drain_dirty(|k, v| {
            drained.insert(k.to_vec(), v.map(|v| v.to_vec()));
        });
        assert_eq!(drained, dirty);
    }

    /// A complete cache (every row RocksDB holds is cached) against a store it is flushed into: reads agree
    /// with a map (a miss is an absent row), the store ends up with exactly the live rows, and no tombstone is
    /// ever written for a row the store does not hold; forgotten rows' slots are reused.
    #[test]
    fn a_complete_cache_forgets_unstored_rows_and_writes_no_needless_tombstone() {
        for namespaced in [false, true] {
            complete_cache_agrees_with_a_store(StateCache::for_rows(namespaced, true));
        }
    }

    fn complete_cache_agrees_with_a_store(mut c: StateCache) {
        use std::collections::BTreeMap;
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut store: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = |n: u64| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % n
        };
        // Half the flushes drain (a snapshot), half write the sorted dirty rows and mark them clean (a flush).
        let flush = |c: &mut StateCache, store: &mut BTreeMap<Vec<u8>, Vec<u8>>, drain: bool| {
            let mut write = |k: &[u8], v: Option<&[u8]>| match v {
                Some(v) => {
                    store.insert(k.to_vec(), v.to_vec());
                }
                None => assert!(store.remove(k).is_some(), "a tombstone for {k:?}, which the store does not hold"),
            };
            if drain {
                c.drain_dirty(write);
            } else {
                let rows = c.dirty_sorted();
                for &r in &rows {
                    let (k, v) = c.row(r);
                    write(k, v);
                }
                c.mark_clean(&rows);
            }
        };
        let mut peak = 0;
        for step in 0..50_000u64 {
            let key: Vec<u8> = vec![(next(200)) as u8; next(36) as usize];
            let value: Vec<u8> = vec![step as u8; next(20) as usize];
            match next(60) {
                0 => {
                    flush(&mut c, &mut store, next(2) == 0);
                    if next(2) == 0 {
                        c.retain_present();
                    }
                }
                1..=20 => {
                    c.delete(&key);
                    model.remove(&key);
                }
                21..=40 => {
                    c.put(&key, &value);
                    model.insert(key.clone(), value);
                }
                _ => {}
            }
            // Reads (the other ops) check the cache: a miss is an absent row.
            let got = match c.get(&key) {
                Cached::Miss => None,
                Cached::Hit(v) => v,
            };
            assert_eq!(got, model.get(&key).map(Vec::as_slice), "step {step}, key {key:?}");
            peak = peak.max(each!(&c, r => r.metas.len()));
        }
        flush(&mut c, &mut store, true);
        assert_eq!(store, model, "the store holds exactly the live rows");
        assert_eq!(c.len(), model.len(), "once flushed, a complete cache holds the live rows and nothing else");
        // Slots of forgotten rows are reused: the slots never outnumber the distinct keys (7001 at most).
        assert!(peak <= 7001, "{peak} slots");
    }

    #[test]
    fn many_rows_survive_index_growth() {
        let mut c = RowCache::<INLINE_KEY>::default();
        for i in 0u64..100_000 {
            c.put(&i.to_be_bytes(), &(i * 3).to_be_bytes());
        }
        for i in (0u64..100_000).step_by(997) {
            assert_eq!(c.get(&i.to_be_bytes()), Cached::Hit(Some(&(i * 3).to_be_bytes()[..])));
        }
        assert!(c.memory_bytes() < 100_000 * 60, "{} bytes", c.memory_bytes());
    }
}
