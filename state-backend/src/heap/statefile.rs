//! The file structure that heap snapshots (`WEIRHP02`) and canonical snapshots (`WEIRCN01`) share, read and
//! written as a stream: an 8-byte magic, the state count, then per state its name, its kind record
//! ([`crate::keyed::meta`]), its row count and its rows — `(row key, value)` for value and list kinds,
//! `(row key, entry count, (user key, value)*)` for maps. Every number is a little-endian `u32` and every byte
//! string is length-prefixed with one. `WEIRHP01` files (value states only, no kind record) are still read.
//!
//! The reader never trusts a length: a byte string longer than what is left of the file is reported as
//! corrupt before anything is allocated for it. The writer patches counts in place once they are known, so a
//! state's rows can be streamed without counting them first.

use crate::error::StateError;
use crate::keyed::layout::RowVisitor;
use crate::keyed::meta::{read_kind_record, KindRecord, StateKind};
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Magic of heap snapshots with value states only.
pub(crate) const HEAP_V1: &[u8; 8] = b"WEIRHP01";
/// Magic of heap snapshots.
pub(crate) const HEAP_V2: &[u8; 8] = b"WEIRHP02";
/// Magic of canonical snapshots.
pub(crate) const CANONICAL_V1: &[u8; 8] = b"WEIRCN01";

/// Bytes the writer buffers before writing to the file.
const WRITE_BUFFER: usize = 1 << 20;

/// One state's header in a file.
#[derive(Clone, Debug)]
pub(crate) struct StateHeader {
    /// State name.
    pub(crate) name: String,
    /// Kind, TTL and namespacing.
    pub(crate) record: KindRecord,
    /// Where the header starts in the file (to come back to it with [`StateFileReader::seek_to`]).
    pub(crate) offset: u64,
}

/// A row read from a file: a value or list row, or one entry of a map row.
#[derive(Debug)]
pub(crate) enum Row<'a> {
    /// A value, reducing, aggregating or list row.
    Value {
        /// Row key.
        key: &'a [u8],
        /// Value (a list's concatenated elements).
        value: &'a [u8],
    },
    /// One entry of a map row; a map row's entries come one after the other.
    MapEntry {
        /// The map's row key (the heap's).
        key: &'a [u8],
        /// The entry's user key.
        user_key: &'a [u8],
        /// The entry's value.
        value: &'a [u8],
    },
}

/// Reads a heap or canonical snapshot file state by state.
pub(crate) struct StateFileReader {
    r: BufReader<File>,
    path: PathBuf,
    magic: [u8; 8],
    /// Bytes of the file not read yet.
    left: u64,
    file_len: u64,
    states_left: u32,
    /// Whether the file must end after the last state (not after a [`StateFileReader::seek_to`]).
    check_end: bool,
    /// The kind and row count of a state whose rows were not read yet.
    unread: Option<(StateKind, u32)>,
    key: Vec<u8>,
    user_key: Vec<u8>,
    value: Vec<u8>,
}

impl StateFileReader {
    /// Opens `path` and reads its magic (one of `accepted`) and state count.
    pub(crate) fn open(path: &Path, accepted: &[&[u8; 8]]) -> Result<Self, StateError> {
        let file = File::open(path).map_err(|e| StateError::io(format!("read {}", path.display()), e))?;
        let file_len = file.metadata().map_err(|e| StateError::io(format!("stat {}", path.display()), e))?.len();
        let mut reader = StateFileReader {
            r: BufReader::with_capacity(1 << 16, file),
            path: path.to_path_buf(),
            magic: [0; 8],
            left: file_len,
            file_len,
            states_left: 0,
            check_end: true,
            unread: None,
            key: Vec::new(),
            user_key: Vec::new(),
            value: Vec::new(),
        };
        let mut magic = [0u8; 8];
        reader.read_exact(&mut magic)?;
        if !accepted.iter().any(|m| **m == magic) {
            let names: Vec<_> = accepted.iter().map(|m| String::from_utf8_lossy(&m[..])).collect();
            return Err(StateError::Corrupt(format!(
                "{} is not a snapshot of the expected format (magic {:?}, expected one of {names:?})",
                path.display(),
                String::from_utf8_lossy(&magic)
            )));
        }
        reader.magic = magic;
        reader.states_left = reader.read_u32()?;
        Ok(reader)
    }

    fn corrupt(&self, what: impl std::fmt::Display) -> StateError {
        StateError::Corrupt(format!("snapshot file {}: {what}", self.path.display()))
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), StateError> {
        if (buf.len() as u64) > self.left {
            return Err(self.corrupt("truncated"));
        }
        self.r.read_exact(buf).map_err(|e| StateError::io(format!("read {}", self.path.display()), e))?;
        self.left -= buf.len() as u64;
        Ok(())
    }

    fn read_u32(&mut self) -> Result<u32, StateError> {
        let mut b = [0u8; 4];
        self.read_exact(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Reads a length-prefixed byte string into `out`.
    fn read_bytes_into(&mut self, out: &mut Vec<u8>) -> Result<(), StateError> {
        let n = self.read_u32()? as u64;
        if n > self.left {
            return Err(self.corrupt(format!("a {n}-byte string with {} bytes left", self.left)));
        }
        out.clear();
        out.resize(n as usize, 0);
        self.read_exact(out)
    }

    /// The next state's header, or `None` after the last one (then the file must end). Rows of the previous
    /// state that were not read are skipped.
    pub(crate) fn next_state(&mut self) -> Result<Option<StateHeader>, StateError> {
        if self.unread.is_some() {
            self.rows(&mut |_| Ok(()))?;
        }
        if self.states_left == 0 {
            if self.check_end && self.left != 0 {
                return Err(self.corrupt(format!("{} bytes after the last state", self.left)));
            }
            return Ok(None);
        }
        self.states_left -= 1;
        let offset = self.file_len - self.left;
        let mut name = Vec::new();
        self.read_bytes_into(&mut name)?;
        let name = String::from_utf8(name).map_err(|e| self.corrupt(format!("state name: {e}")))?;
        let record = if self.magic == *HEAP_V1 {
            (StateKind::Value, None, false)
        } else {
            let mut limited = (&mut self.r).take(self.left.min(crate::keyed::meta::TTL_RECORD_LEN as u64));
            let before = limited.limit();
            let record = read_kind_record(&mut limited)?;
            self.left -= before - limited.limit();
            record
        };
        let rows = self.read_u32()?;
        self.unread = Some((record.0, rows));
        Ok(Some(StateHeader { name, record, offset }))
    }

    /// Goes back (or forward) to the header of a state read before: the next [`StateFileReader::next_state`]
    /// reads it again, and the one after it returns `None`.
    pub(crate) fn seek_to(&mut self, header: &StateHeader) -> Result<(), StateError> {
        self.r
            .seek(SeekFrom::Start(header.offset))
            .map_err(|e| StateError::io(format!("seek in {}", self.path.display()), e))?;
        self.left = self.file_len - header.offset;
        self.states_left = 1;
        self.check_end = false;
        self.unread = None;
        Ok(())
    }

    /// Calls `f` for every row of the state whose header was read last, in file order.
    pub(crate) fn rows(&mut self, f: &mut dyn FnMut(Row<'_>) -> Result<(), StateError>) -> Result<(), StateError> {
        let Some((kind, rows)) = self.unread.take() else { return Ok(()) };
        let (mut key, mut user_key, mut value) =
            (std::mem::take(&mut self.key), std::mem::take(&mut self.user_key), std::mem::take(&mut self.value));
        let result = (|| {
            for _ in 0..rows {
                self.read_bytes_into(&mut key)?;
                if kind == StateKind::Map {
                    for _ in 0..self.read_u32()? {
                        self.read_bytes_into(&mut user_key)?;
                        self.read_bytes_into(&mut value)?;
                        f(Row::MapEntry { key: &key, user_key: &user_key, value: &value })?;
                    }
                } else {
                    self.read_bytes_into(&mut value)?;
                    f(Row::Value { key: &key, value: &value })?;
                }
            }
            Ok(())
        })();
        (self.key, self.user_key, self.value) = (key, user_key, value);
        result
    }
}

/// Writes a heap-structured snapshot file, streaming: counts are patched in once known.
pub(crate) struct StateFileWriter {
    file: File,
    path: PathBuf,
    buf: Vec<u8>,
    /// Bytes of the file written before `buf`.
    flushed: u64,
    states: u32,
    /// The open state: where its row count is, how many rows it has, and its kind.
    state: Option<(u64, u32, StateKind)>,
    /// The open map row: its key, where its entry count is, and the count.
    group: Option<(Vec<u8>, u64, u32)>,
}

impl StateFileWriter {
    /// Creates `path` (replacing it) and writes `magic`.
    pub(crate) fn create(path: &Path, magic: &[u8; 8]) -> Result<Self, StateError> {
        let file = File::create(path).map_err(|e| StateError::io(format!("create {}", path.display()), e))?;
        let mut w = StateFileWriter {
            file,
            path: path.to_path_buf(),
            buf: Vec::with_capacity(WRITE_BUFFER + (64 << 10)),
            flushed: 0,
            states: 0,
            state: None,
            group: None,
        };
        w.buf.extend_from_slice(magic);
        w.buf.extend_from_slice(&0u32.to_le_bytes());
        Ok(w)
    }

    fn pos(&self) -> u64 {
        self.flushed + self.buf.len() as u64
    }

    fn write_bytes(&mut self, b: &[u8]) -> Result<(), StateError> {
        let len = u32::try_from(b.len())
            .map_err(|_| StateError::Corrupt(format!("a {}-byte string does not fit a snapshot file", b.len())))?;
        self.buf.extend_from_slice(&len.to_le_bytes());
        self.buf.extend_from_slice(b);
        if self.buf.len() >= WRITE_BUFFER {
            self.flush_buf()?;
        }
        Ok(())
    }

    fn flush_buf(&mut self) -> Result<(), StateError> {
        self.file.write_all(&self.buf).map_err(|e| StateError::io(format!("write {}", self.path.display()), e))?;
        self.flushed += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Overwrites the `u32` at file offset `at` (in the buffer, or already in the file).
    fn patch(&mut self, at: u64, value: u32) -> Result<(), StateError> {
        let bytes = value.to_le_bytes();
        if at >= self.flushed {
            let i = (at - self.flushed) as usize;
            self.buf[i..i + 4].copy_from_slice(&bytes);
            Ok(())
        } else {
            self.file.write_all_at(&bytes, at).map_err(|e| StateError::io(format!("write {}", self.path.display()), e))
        }
    }

    fn end_group(&mut self) -> Result<(), StateError> {
        if let Some((_, at, count)) = self.group.take() {
            self.patch(at, count)?;
        }
        Ok(())
    }

    fn end_state(&mut self) -> Result<(), StateError> {
        self.end_group()?;
        if let Some((at, rows, _)) = self.state.take() {
            self.patch(at, rows)?;
        }
        Ok(())
    }

    /// Starts the next state (ending the previous one); `record` is its encoded kind record.
    pub(crate) fn begin_state(&mut self, name: &str, kind: StateKind, record: &[u8]) -> Result<(), StateError> {
        self.end_state()?;
        self.states = self.states.checked_add(1).ok_or_else(|| StateError::Corrupt("too many states".into()))?;
        self.write_bytes(name.as_bytes())?;
        self.buf.extend_from_slice(record);
        self.state = Some((self.pos(), 0, kind));
        self.buf.extend_from_slice(&0u32.to_le_bytes());
        Ok(())
    }

    fn count_row(&mut self) -> Result<(), StateError> {
        let Some((_, rows, _)) = &mut self.state else {
            return Err(StateError::Corrupt("a row written before its state".into()));
        };
        *rows = rows.checked_add(1).ok_or_else(|| StateError::Corrupt("a state has 2^32 rows or more".into()))?;
        Ok(())
    }

    /// Writes a value or list row of the open state.
    pub(crate) fn value_row(&mut self, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        self.count_row()?;
        self.write_bytes(key)?;
        self.write_bytes(value)
    }

    /// Writes one entry of a map row of the open state; entries of one row key must come one after the other.
    pub(crate) fn map_entry(&mut self, key: &[u8], user_key: &[u8], value: &[u8]) -> Result<(), StateError> {
        if self.group.as_ref().is_none_or(|(k, _, _)| k != key) {
            self.end_group()?;
            self.count_row()?;
            self.write_bytes(key)?;
            self.group = Some((key.to_vec(), self.pos(), 0));
            self.buf.extend_from_slice(&0u32.to_le_bytes());
        }
        if let Some((_, _, count)) = &mut self.group {
            *count = count.checked_add(1).ok_or_else(|| StateError::Corrupt("a map has 2^32 entries".into()))?;
        }
        self.write_bytes(user_key)?;
        self.write_bytes(value)
    }

    /// Ends the last state, patches the state count and writes everything out; returns the file's size. The
    /// file is not synced: a local snapshot is uploaded from the page cache, and a crash fails it anyway.
    pub(crate) fn finish(mut self) -> Result<u64, StateError> {
        self.end_state()?;
        self.patch(8, self.states)?;
        self.flush_buf()?;
        Ok(self.flushed)
    }
}

/// Rows gathered in one byte arena to be sorted by key: a heap snapshot's rows come from hash maps, and RocksDB
/// and canonical files need them in key order. One allocation for all bytes instead of two per row.
#[derive(Default)]
pub(crate) struct SortBuffer {
    arena: Vec<u8>,
    /// Offset of the key in `arena`, key length, value length; the value follows the key.
    rows: Vec<(usize, u32, u32)>,
}

impl SortBuffer {
    /// Adds a row whose key is the concatenation of `key_parts`.
    pub(crate) fn push(&mut self, key_parts: &[&[u8]], value: &[u8]) {
        let off = self.arena.len();
        for part in key_parts {
            self.arena.extend_from_slice(part);
        }
        let key_len = (self.arena.len() - off) as u32;
        self.arena.extend_from_slice(value);
        self.rows.push((off, key_len, value.len() as u32));
    }

    fn row(&self, i: usize) -> (&[u8], &[u8]) {
        let (off, k, v) = self.rows[i];
        let key_end = off + k as usize;
        (&self.arena[off..key_end], &self.arena[key_end..key_end + v as usize])
    }

    /// Sorts the rows by key (bytewise).
    pub(crate) fn sort(&mut self) {
        let arena = &self.arena;
        self.rows.sort_unstable_by(|a, b| arena[a.0..a.0 + a.1 as usize].cmp(&arena[b.0..b.0 + b.1 as usize]));
    }

    /// Calls `f(key, value)` for every row, in order.
    pub(crate) fn for_each(&self, f: &mut RowVisitor<'_>) -> Result<(), StateError> {
        for i in 0..self.rows.len() {
            let (k, v) = self.row(i);
            f(k, v)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyed::meta::encode_kind_record;

    /// A row as (state, key, user key, value).
    type FlatRow = (String, Vec<u8>, Option<Vec<u8>>, Vec<u8>);

    /// Every row of a file.
    fn read_all(path: &Path) -> Vec<FlatRow> {
        let mut r = StateFileReader::open(path, &[CANONICAL_V1]).unwrap();
        let mut out = Vec::new();
        while let Some(st) = r.next_state().unwrap() {
            r.rows(&mut |row| {
                out.push(match row {
                    Row::Value { key, value } => (st.name.clone(), key.to_vec(), None, value.to_vec()),
                    Row::MapEntry { key, user_key, value } => {
                        (st.name.clone(), key.to_vec(), Some(user_key.to_vec()), value.to_vec())
                    }
                });
                Ok(())
            })
            .unwrap();
        }
        out
    }

    #[test]
    fn streamed_files_read_back_also_past_the_write_buffer() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        let mut w = StateFileWriter::create(&path, CANONICAL_V1).unwrap();
        let mut want = Vec::new();
        w.begin_state("m", StateKind::Map, &encode_kind_record(StateKind::Map, None, false)).unwrap();
        // Groups big enough that their counts are patched in the file, not in the buffer.
        for g in 0u32..3 {
            for e in 0u32..20_000 {
                let (k, uk, v) = (g.to_be_bytes().to_vec(), e.to_be_bytes().to_vec(), vec![7u8; 30]);
                w.map_entry(&k, &uk, &v).unwrap();
                want.push(("m".to_string(), k, Some(uk), v));
            }
        }
        w.begin_state("empty", StateKind::List, &encode_kind_record(StateKind::List, None, true)).unwrap();
        w.begin_state("v", StateKind::Value, &encode_kind_record(StateKind::Value, None, false)).unwrap();
        for i in 0u32..50_000 {
            w.value_row(&i.to_be_bytes(), &[1, 2, 3]).unwrap();
            want.push(("v".to_string(), i.to_be_bytes().to_vec(), None, vec![1, 2, 3]));
        }
        let size = w.finish().unwrap();
        assert_eq!(size, std::fs::metadata(&path).unwrap().len());
        assert!(size > 2 * WRITE_BUFFER as u64);
        assert_eq!(read_all(&path), want);

        let mut r = StateFileReader::open(&path, &[CANONICAL_V1]).unwrap();
        let mut headers = Vec::new();
        while let Some(h) = r.next_state().unwrap() {
            headers.push(h);
        }
        assert_eq!(headers.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(), ["m", "empty", "v"]);
        assert_eq!(headers[1].record, (StateKind::List, None, true));
        r.seek_to(&headers[2]).unwrap();
        let h = r.next_state().unwrap().unwrap();
        let mut n = 0;
        r.rows(&mut |_| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!((h.name.as_str(), n), ("v", 50_000));
        r.seek_to(&headers[0]).unwrap();
        assert_eq!(r.next_state().unwrap().unwrap().name, "m");
        assert!(r.next_state().unwrap().is_none(), "one state after a seek");
        assert!(StateFileReader::open(&path, &[HEAP_V2]).is_err(), "the magic is checked");
    }

    #[test]
    fn the_sort_buffer_sorts_by_whole_keys() {
        let mut b = SortBuffer::default();
        b.push(&[b"b", b"2"], b"x");
        b.push(&[b"a"], b"yy");
        b.push(&[b"b", b""], b"");
        b.push(&[b"b1"], b"z");
        b.sort();
        let mut out = Vec::new();
        b.for_each(&mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(())
        })
        .unwrap();
        let want: Vec<(Vec<u8>, Vec<u8>)> =
            [("a", "yy"), ("b", ""), ("b1", "z"), ("b2", "x")].map(|(k, v)| (k.into(), v.into())).into();
        assert_eq!(out, want);
    }

    #[test]
    fn corrupt_lengths_are_refused_before_allocating() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        let mut file = CANONICAL_V1.to_vec();
        file.extend_from_slice(&1u32.to_le_bytes());
        file.extend_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&path, &file).unwrap();
        let mut r = StateFileReader::open(&path, &[CANONICAL_V1]).unwrap();
        let e = r.next_state().unwrap_err().to_string();
        assert!(e.contains("bytes left"), "{e}");
        file.truncate(12);
        std::fs::write(&path, &file).unwrap();
        let mut r = StateFileReader::open(&path, &[CANONICAL_V1]).unwrap();
        assert!(r.next_state().unwrap_err().to_string().contains("truncated"));
        std::fs::write(&path, [CANONICAL_V1.as_slice(), &0u32.to_le_bytes(), b"x"].concat()).unwrap();
        let mut r = StateFileReader::open(&path, &[CANONICAL_V1]).unwrap();
        assert!(r.next_state().unwrap_err().to_string().contains("after the last state"));
    }
}
