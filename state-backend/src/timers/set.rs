//! The heap backend's timer rows: an ordered set of byte strings whose snapshot is a copy of pointers.
//!
//! Rows are packed into chunks of at most [`CHUNK_ROWS`] sorted rows (one buffer of row bytes and one of row
//! ends), kept per key group in order and shared through `Arc`s; beside each chunk's pointer is the head of its
//! first row, so that finding a row's chunk reads no chunk. A snapshot clones the chunk lists — 32 bytes per
//! chunk, some 50k chunks for 10M timers — and a writer walks its chunks while the set goes on changing: the
//! first change of a chunk the snapshot still holds copies that chunk (two buffers), every other change is in
//! place. Packing also keeps a row at its bytes plus four, where an ordered set of vectors pays an allocation
//! per row.

use crate::error::StateError;
use crate::keyed::layout::row_key_group;
use std::sync::Arc;

/// Rows a chunk holds at most: inserting moves half a chunk on average, and a snapshot costs a pointer per chunk.
#[cfg(not(test))]
const CHUNK_ROWS: usize = 256;
/// Tests: chunks split and empty out often, whichever backend test runs.
#[cfg(test)]
const CHUNK_ROWS: usize = 4;
/// Row bytes a chunk holds at most (it splits past either limit), so that offsets stay small.
const CHUNK_BYTES: usize = 64 << 10;

/// Sorted rows, packed.
#[derive(Clone, Debug, Default)]
struct Chunk {
    /// The rows' bytes, one after the other.
    data: Vec<u8>,
    /// Where each row ends in `data`.
    ends: Vec<u32>,
}

impl Chunk {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn start(&self, i: usize) -> usize {
        match i {
            0 => 0,
            _ => self.ends[i - 1] as usize,
        }
    }

    fn row(&self, i: usize) -> &[u8] {
        &self.data[self.start(i)..self.ends[i] as usize]
    }

    /// Where `row` is (`Ok`) or would go (`Err`).
    fn search(&self, row: &[u8]) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.row(mid).cmp(row) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    fn insert(&mut self, i: usize, row: &[u8]) {
        let at = self.start(i);
        self.data.splice(at..at, row.iter().copied());
        for e in &mut self.ends[i..] {
            *e += row.len() as u32;
        }
        self.ends.insert(i, (at + row.len()) as u32);
    }

    fn remove(&mut self, i: usize) {
        let (from, to) = (self.start(i), self.ends[i] as usize);
        self.data.drain(from..to);
        self.ends.remove(i);
        for e in &mut self.ends[i..] {
            *e -= (to - from) as u32;
        }
    }

    /// Moves the upper half of the rows into a new chunk.
    fn split(&mut self) -> Chunk {
        let mid = self.len() / 2;
        let cut = self.start(mid);
        let data = self.data.split_off(cut);
        let ends = self.ends.split_off(mid).into_iter().map(|e| e - cut as u32).collect();
        Chunk { data, ends }
    }
}

/// Bytes of a chunk's first row kept beside its pointer.
const HEAD: usize = 22;

/// A chunk (never empty) and the start of its first row, so that finding a row's chunk reads no chunk.
#[derive(Clone, Debug)]
struct Entry {
    head: [u8; HEAD],
    head_len: u8,
    /// Whether the first row is longer than `head`.
    cut: bool,
    chunk: Arc<Chunk>,
}

impl Entry {
    fn new(chunk: Chunk) -> Entry {
        let mut e = Entry { head: [0; HEAD], head_len: 0, cut: false, chunk: Arc::new(chunk) };
        e.refresh();
        e
    }

    /// Takes the head again from the chunk's first row.
    fn refresh(&mut self) {
        let first = self.chunk.row(0);
        let n = first.len().min(HEAD);
        self.head[..n].copy_from_slice(&first[..n]);
        self.head_len = n as u8;
        self.cut = first.len() > HEAD;
    }

    /// Whether the chunk's first row sorts at or before `row`.
    fn starts_at_or_before(&self, row: &[u8]) -> bool {
        let head = &self.head[..self.head_len as usize];
        if !self.cut {
            return head <= row;
        }
        match head.cmp(&row[..row.len().min(HEAD)]) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => self.chunk.row(0) <= row,
        }
    }
}

/// The chunks of every key group (indexed by key group), in row order.
type Groups = Vec<Vec<Entry>>;

/// An ordered set of timer rows (`key_group | …`) with cheap snapshots (see the module docs).
#[derive(Debug)]
pub(crate) struct TimerSet {
    prefix_len: usize,
    groups: Groups,
    len: usize,
    bytes: u64,
}

/// The rows of a [`TimerSet`] at the time of [`TimerSet::snapshot`], unaffected by later changes.
#[derive(Debug)]
pub(crate) struct TimerSetSnapshot {
    groups: Groups,
    len: usize,
}

impl TimerSet {
    /// An empty set of rows whose key-group prefix is `prefix_len` bytes.
    pub(crate) fn new(prefix_len: usize) -> Self {
        TimerSet { prefix_len, groups: Vec::new(), len: 0, bytes: 0 }
    }

    /// How many rows it holds.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The bytes of its rows.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Removes every row.
    pub(crate) fn clear(&mut self) {
        *self = TimerSet::new(self.prefix_len);
    }

    fn group(&self, row: &[u8]) -> Option<usize> {
        row_key_group(row, self.prefix_len).ok().map(|kg| kg as usize)
    }

    /// The chunk of `chunks` where `row` is or would go.
    fn chunk_of(chunks: &[Entry], row: &[u8]) -> usize {
        chunks.partition_point(|c| c.starts_at_or_before(row)).saturating_sub(1)
    }

    /// Whether it holds `row`.
    pub(crate) fn contains(&self, row: &[u8]) -> bool {
        let Some(chunks) = self.group(row).and_then(|g| self.groups.get(g)) else { return false };
        !chunks.is_empty() && chunks[Self::chunk_of(chunks, row)].chunk.search(row).is_ok()
    }

    /// Adds `row`; whether it is new. A row shorter than its key-group prefix is corrupt.
    pub(crate) fn insert(&mut self, row: &[u8]) -> Result<bool, StateError> {
        let g = self
            .group(row)
            .ok_or_else(|| StateError::Corrupt(format!("timer row {row:?} is shorter than its key-group prefix")))?;
        if self.groups.len() <= g {
            self.groups.resize_with(g + 1, Vec::new);
        }
        let chunks = &mut self.groups[g];
        if chunks.is_empty() {
            let mut first = Chunk::default();
            first.insert(0, row);
            chunks.push(Entry::new(first));
        } else {
            let c = Self::chunk_of(chunks, row);
            let Err(i) = chunks[c].chunk.search(row) else { return Ok(false) };
            // Copies the chunk if a snapshot still holds it.
            let chunk = Arc::make_mut(&mut chunks[c].chunk);
            chunk.insert(i, row);
            if chunk.len() > CHUNK_ROWS || (chunk.data.len() > CHUNK_BYTES && chunk.len() > 1) {
                let upper = chunk.split();
                chunks.insert(c + 1, Entry::new(upper));
            }
            if i == 0 {
                chunks[c].refresh();
            }
        }
        self.len += 1;
        self.bytes += row.len() as u64;
        Ok(true)
    }

    /// Removes `row`; whether it was there.
    pub(crate) fn remove(&mut self, row: &[u8]) -> bool {
        let Some(chunks) = self.group(row).and_then(|g| self.groups.get_mut(g)) else { return false };
        if chunks.is_empty() {
            return false;
        }
        let c = Self::chunk_of(chunks, row);
        let Ok(i) = chunks[c].chunk.search(row) else { return false };
        let chunk = Arc::make_mut(&mut chunks[c].chunk);
        chunk.remove(i);
        if chunk.len() == 0 {
            chunks.remove(c);
        } else if i == 0 {
            chunks[c].refresh();
        }
        self.len -= 1;
        self.bytes -= row.len() as u64;
        true
    }

    /// The rows from `lo` (included) to `hi` (excluded; `None`: to the end), in order.
    pub(crate) fn range<'a>(&'a self, lo: &[u8], hi: Option<&'a [u8]>) -> Rows<'a> {
        let g = self.group(lo).unwrap_or(0);
        let (c, r) = match self.groups.get(g) {
            Some(chunks) if !chunks.is_empty() => {
                let c = Self::chunk_of(chunks, lo);
                (c, chunks[c].chunk.search(lo).unwrap_or_else(|i| i))
            }
            _ => (0, 0),
        };
        Rows { groups: &self.groups, g, c, r, hi }
    }

    /// Every row, in order.
    pub(crate) fn iter(&self) -> Rows<'_> {
        Rows { groups: &self.groups, g: 0, c: 0, r: 0, hi: None }
    }

    /// The rows as they are now, for a writer to walk while the set changes: an entry per chunk.
    pub(crate) fn snapshot(&self) -> TimerSetSnapshot {
        TimerSetSnapshot { groups: self.groups.clone(), len: self.len }
    }
}

impl TimerSetSnapshot {
    /// How many rows it holds.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Every row, in order.
    pub(crate) fn iter(&self) -> Rows<'_> {
        Rows { groups: &self.groups, g: 0, c: 0, r: 0, hi: None }
    }
}

/// Rows of a [`TimerSet`] or its snapshot, in order.
pub(crate) struct Rows<'a> {
    groups: &'a [Vec<Entry>],
    g: usize,
    c: usize,
    r: usize,
    hi: Option<&'a [u8]>,
}

impl<'a> Iterator for Rows<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        loop {
            let chunks = self.groups.get(self.g)?;
            let Some(Entry { chunk, .. }) = chunks.get(self.c) else {
                (self.g, self.c, self.r) = (self.g + 1, 0, 0);
                continue;
            };
            if self.r >= chunk.len() {
                (self.c, self.r) = (self.c + 1, 0);
                continue;
            }
            let row = chunk.row(self.r);
            if self.hi.is_some_and(|hi| row >= hi) {
                self.g = self.groups.len();
                return None;
            }
            self.r += 1;
            return Some(row);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Against an ordered set: inserts, removals, lookups and ranges agree, chunks split and empty ones go,
        /// and a snapshot keeps the rows it was taken with while the set changes.
        #[test]
        fn timer_sets_match_an_ordered_set(
            ops in proptest::collection::vec((0u8..4, 0u8..3, proptest::collection::vec(0u8..4, 0..4)), 1..1500),
        ) {
            let mut set = TimerSet::new(1);
            let mut model = BTreeSet::new();
            let mut snap: Option<(TimerSetSnapshot, Vec<Vec<u8>>)> = None;
            for (i, (op, kg, rest)) in ops.iter().enumerate() {
                // 20 to 23 bytes: rows longer than a chunk's head, and shorter, sharing it.
                let mut row = vec![*kg];
                row.extend_from_slice(&[7; HEAD - 3]);
                row.extend_from_slice(rest);
                match op {
                    0 | 1 => prop_assert_eq!(set.insert(&row).unwrap(), model.insert(row.clone())),
                    2 => prop_assert_eq!(set.remove(&row), model.remove(&row)),
                    _ => {
                        let hi = [kg + 1];
                        let got: Vec<&[u8]> = set.range(&row, Some(&hi)).collect();
                        let want: Vec<&[u8]> = model.range(row.clone()..hi.to_vec()).map(|r| &r[..]).collect();
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(set.contains(&row), model.contains(&row));
                prop_assert_eq!(set.len(), model.len());
                prop_assert_eq!(set.bytes(), model.iter().map(|r| r.len() as u64).sum::<u64>());
                if i % 300 == 0 {
                    if let Some((s, rows)) = snap.take() {
                        prop_assert_eq!(s.len(), rows.len());
                        prop_assert_eq!(s.iter().map(|r| r.to_vec()).collect::<Vec<_>>(), rows);
                    }
                    snap = Some((set.snapshot(), model.iter().cloned().collect()));
                }
            }
            prop_assert_eq!(set.iter().map(|r| r.to_vec()).collect::<Vec<_>>(), model.iter().cloned().collect::<Vec<_>>());
            if let Some((s, rows)) = snap {
                prop_assert_eq!(s.iter().map(|r| r.to_vec()).collect::<Vec<_>>(), rows);
            }
            prop_assert!(set.insert(&[]).is_err(), "a row without its key-group prefix");
        }
    }
}
