//! Split positions as operator list state, for sources that read numbered splits: one element per split (its id
//! and the index of its next record), so each split resumes where the checkpoint left it and the splits are
//! dealt out again when the source rescales (Flink's `SplitDistribute` list state).

use crate::api::operator::{InitContext, OperatorError, SnapshotContext, SourceOutput};
use std::ops::Range;
use std::time::{Duration, Instant};
use weir_common::job::datagen::split_range;
use weir_common::job::kind::{field_err, ConfigFieldError};

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
            let bytes: &[u8; ENCODED] = e.as_slice().try_into().map_err(|_| {
                OperatorError::UnreadableState(format!("{source}: corrupt split state of {} bytes", e.len()))
            })?;
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

/// One split of a numbered sequence: positions `start..end`, `next` the one to read next. In the contiguous
/// layout a position is the record's number; in the block layout it counts the split's own records from 0
/// ([`NumberedSplits::number`] gives the record's number).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NumberedSplit {
    /// The split's id.
    pub id: u32,
    /// Its first position.
    pub start: u64,
    /// The position to read next.
    pub next: u64,
    /// Past its last position.
    pub end: u64,
}

/// How a numbered sequence is cut into splits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SplitLayout {
    /// Split `j` of `s` holds the contiguous range `[⌊j·n/s⌋, ⌊(j+1)·n/s⌋)`.
    #[default]
    Contiguous,
    /// Split `j` of `s` holds blocks `j, j+s, j+2s, …` of `size` consecutive numbers, so that every split runs
    /// through the whole sequence (and, for a generator whose time follows the number, through the same time).
    Blocks {
        /// Numbers per block (at least 1).
        size: u64,
    },
}

impl SplitLayout {
    /// The layout a source's `block` config names: 0 is contiguous.
    pub fn from_block(block: u64) -> Self {
        if block == 0 {
            SplitLayout::Contiguous
        } else {
            SplitLayout::Blocks { size: block }
        }
    }

    /// The positions of split `j` of `splits` over `count` numbers (`None`: unbounded).
    pub fn extent(self, j: u32, splits: u32, count: Option<u64>) -> (u64, u64) {
        match self {
            SplitLayout::Contiguous => split_range(j, splits, count),
            SplitLayout::Blocks { size } => {
                let Some(n) = count else { return (0, u64::MAX) };
                let (j, s) = (u128::from(j), u128::from(splits));
                let (n, size) = (u128::from(n), u128::from(size));
                let blocks = n.div_ceil(size);
                if j >= blocks {
                    return (0, 0);
                }
                let mine = (blocks - 1 - j) / s + 1;
                let mut records = mine * size;
                // The last block may be short, and it is this split's if its index is.
                if (blocks - 1) % s == j {
                    records -= blocks * size - n;
                }
                (0, records.min(u128::from(u64::MAX)) as u64)
            }
        }
    }

    /// The number of the record at position `pos` of split `j` of `splits`.
    pub fn number(self, j: u32, splits: u32, pos: u64) -> u64 {
        match self {
            SplitLayout::Contiguous => pos,
            SplitLayout::Blocks { size } => {
                let block = u64::from(j).wrapping_add((pos / size).wrapping_mul(u64::from(splits)));
                block.wrapping_mul(size).wrapping_add(pos % size)
            }
        }
    }
}

/// The splits a subtask of a source over numbered records reads (`datagen`, `nexmark`): the sequence cut into
/// contiguous ranges dealt out round-robin, their positions in operator list state, and an optional rate limit.
#[derive(Debug, Default)]
pub struct NumberedSplits {
    splits: Vec<NumberedSplit>,
    layout: SplitLayout,
    count: u32,
    current: usize,
    rate_per_subtask: f64,
    started: Option<Instant>,
    emitted: u64,
}

impl NumberedSplits {
    /// Restores the subtask's splits from list state `state` or, in a fresh job, deals out the `splits` splits
    /// of `count` records (`None`: unbounded), cut as `layout` says, round-robin; `rate_per_sec` limits the whole
    /// source (0: no limit). `source` names the kind in errors.
    #[allow(clippy::too_many_arguments)]
    pub fn initialize(
        &mut self,
        ctx: &mut InitContext<'_>,
        state: &str,
        source: &str,
        splits: u32,
        layout: SplitLayout,
        count: Option<u64>,
        rate_per_sec: u64,
    ) -> Result<(), OperatorError> {
        let p = ctx.info.parallelism;
        self.rate_per_subtask = rate_per_sec as f64 / p as f64;
        (self.layout, self.count) = (layout, splits);
        let restored = ctx.operator_state.list_state(state)?;
        if ctx.restored {
            for SplitPosition { id, next } in read_positions(restored, source)? {
                let (start, end) = layout.extent(id, splits, count);
                self.splits.push(NumberedSplit { id, start, next, end });
            }
        } else {
            for id in (ctx.info.subtask.0..splits).step_by(p as usize) {
                let (start, end) = layout.extent(id, splits, count);
                self.splits.push(NumberedSplit { id, start, next: start, end });
            }
        }
        Ok(())
    }

    /// How the splits are cut, and how many there are: what [`SplitLayout::number`] needs.
    pub fn layout(&self) -> (SplitLayout, u32) {
        (self.layout, self.count)
    }

    /// How many splits the subtask reads.
    pub fn len(&self) -> usize {
        self.splits.len()
    }

    /// Whether the subtask reads none.
    pub fn is_empty(&self) -> bool {
        self.splits.is_empty()
    }

    /// Writes the positions into list state `state`.
    pub fn snapshot(&self, ctx: &mut SnapshotContext<'_>, state: &str) -> Result<(), OperatorError> {
        let positions = self.splits.iter().map(|s| SplitPosition { id: s.id, next: s.next });
        write_positions(ctx.operator_state.list_state(state)?, positions);
        Ok(())
    }

    /// How many records a poll may emit, at most `max`; or, under the rate limit, how long to wait first.
    pub fn budget(&mut self, max: usize) -> Result<usize, Duration> {
        if self.rate_per_subtask <= 0.0 {
            return Ok(max);
        }
        let started = *self.started.get_or_insert_with(Instant::now);
        let allowed = (started.elapsed().as_secs_f64() * self.rate_per_subtask) as u64 + 1;
        if self.emitted >= allowed {
            let wait = (self.emitted + 1) as f64 / self.rate_per_subtask - started.elapsed().as_secs_f64();
            return Err(Duration::from_secs_f64(wait.clamp(0.0005, 0.1)));
        }
        Ok(max.min((allowed - self.emitted) as usize))
    }

    /// Hands out up to `budget` records as runs: `f(split, records)` for each, in the order the runs make the
    /// poll's rows. `in_turn`: a fair share of the budget from each split in turn (so that every split moves
    /// through event time together), else each split to its end before the next. Splits found finished are
    /// reported to `out`. Returns the runs (split slot, records) and the budget left — left over only when
    /// every split is finished.
    pub fn take(
        &mut self,
        out: &mut SourceOutput,
        mut budget: usize,
        in_turn: bool,
        mut f: impl FnMut(&NumberedSplit, Range<u64>),
    ) -> (Vec<(u32, u32)>, usize) {
        let share = if in_turn { (budget / self.splits.len().max(1)).max(1) } else { usize::MAX };
        let mut runs = Vec::new();
        let mut visited_without_records = 0;
        while budget > 0 && visited_without_records < self.splits.len() {
            let slot = self.current % self.splits.len();
            let split = &mut self.splits[slot];
            if split.next >= split.end {
                // Also for a split restored finished, which must not hold the watermark back either.
                out.finish_split(slot as u32);
                visited_without_records += 1;
                self.current += 1;
                continue;
            }
            visited_without_records = 0;
            let n = budget.min(share).min((split.end - split.next).min(usize::MAX as u64) as usize);
            f(split, split.next..split.next + n as u64);
            runs.push((slot as u32, n as u32));
            split.next += n as u64;
            budget -= n;
            self.emitted += n as u64;
            if in_turn || split.next >= split.end {
                self.current += 1;
            }
        }
        (runs, budget)
    }
}

/// Most splits a numbered source (`datagen`, `nexmark`) is cut into: each split is a position its subtask keeps
/// in memory and writes into operator list state at every checkpoint (about 100 bytes in all), and 4,294,967,295
/// of them once grew a task manager past 19 GB for a job of 1,000 records. Ten million (about 1 GB over the
/// subtasks) still lets a test drive the job manager's operator-state guards with millions of list elements.
pub const MAX_SPLITS: u64 = 10_000_000;

pub(crate) fn check_splits(splits: u64) -> Result<u32, ConfigFieldError> {
    match splits {
        1..=MAX_SPLITS => Ok(splits as u32),
        _ => Err(field_err("splits", format!("must be between 1 and {MAX_SPLITS}, not {splits}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_layout_covers_every_number_once_in_blocks_dealt_round_robin() {
        for (n, splits, size) in [(1000u64, 2u32, 50u64), (1001, 3, 7), (5, 4, 2), (3, 8, 1), (100, 1, 1000)] {
            let layout = SplitLayout::from_block(size);
            let mut seen = vec![0u32; n as usize];
            for j in 0..splits {
                let (start, end) = layout.extent(j, splits, Some(n));
                for pos in start..end {
                    let i = layout.number(j, splits, pos);
                    assert!(i < n, "n={n} s={splits} b={size}: split {j} pos {pos} -> {i}");
                    assert_eq!((i / size) % u64::from(splits), u64::from(j), "in one of its own blocks");
                    seen[i as usize] += 1;
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "n={n} s={splits} b={size}: {seen:?}");
        }
        let c = SplitLayout::from_block(0);
        assert_eq!(c.extent(1, 2, Some(10)), (5, 10));
        assert_eq!(c.number(1, 2, 7), 7);
        // Flink's block=50 at p=2: split 1 starts at 50 and jumps to 150 after 50 records.
        let b = SplitLayout::from_block(50);
        assert_eq!((b.number(1, 2, 0), b.number(1, 2, 49), b.number(1, 2, 50)), (50, 99, 150));
    }

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
