//! The exactly-once `kafka-sink`'s bookkeeping of transactional ids, as pure functions.
//!
//! Subtask `s` names its transactions `<prefix>-<s>-<n>` with `n` counting up from 0, one per checkpoint: so the
//! ids a subtask has ever used are `0 … next-1`, with no gap, and an id past them was never used. The sink's union
//! list state holds, for every subtask index: the next `n` (the transaction open at the snapshot) and the
//! transactions pre-committed at that checkpoint or before and not known to be committed, with their producer id
//! and epoch. After a restore at parallelism `p`, subtask `i` answers for every old subtask `j` with
//! `j mod p = i`: it commits `j`'s listed transactions (their checkpoint completed) and then fences `j`'s ids from
//! its `next` on until one the broker had never seen (an epoch of 0), which aborts whatever the failed run left
//! open under them. Subtask `i` then goes on with `i`'s ids from there; it keeps the other `j`'s positions in its
//! snapshots, so that a later rescale finds them again.

use crate::api::operator::OperatorError;
use weir_common::ids::CheckpointId;

/// A transaction pre-committed (flushed) at a checkpoint barrier, to be committed when that checkpoint completes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingTxn {
    /// The checkpoint whose completion commits it.
    pub checkpoint: CheckpointId,
    /// The subtask whose id it is.
    pub subtask: u32,
    /// Its number among the subtask's ids.
    pub n: u64,
    /// The producer id the broker gave it.
    pub producer_id: i64,
    /// The producer epoch it was written at.
    pub epoch: i16,
}

/// One element of the sink's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnEntry {
    /// Subtask `subtask`'s next id number.
    Next {
        /// The subtask.
        subtask: u32,
        /// Its next id number.
        next: u64,
    },
    /// A transaction to commit.
    Pending(PendingTxn),
}

/// The transactional id of subtask `subtask`'s `n`th transaction.
pub fn transactional_id(prefix: &str, subtask: u32, n: u64) -> String {
    format!("{prefix}-{subtask}-{n}")
}

impl TxnEntry {
    /// The entry as a state element (tab-separated text: readable in a savepoint).
    pub fn encode(&self) -> Vec<u8> {
        match self {
            TxnEntry::Next { subtask, next } => format!("next\t{subtask}\t{next}"),
            TxnEntry::Pending(p) => {
                format!("pending\t{}\t{}\t{}\t{}\t{}", p.checkpoint, p.subtask, p.n, p.producer_id, p.epoch)
            }
        }
        .into_bytes()
    }

    /// Reads a state element; `who` names the sink in the error.
    pub fn decode(e: &[u8], who: &str) -> Result<TxnEntry, OperatorError> {
        let corrupt = || {
            OperatorError::UnreadableState(format!(
                "{who}: corrupt transaction entry {:?} in restored state",
                String::from_utf8_lossy(e)
            ))
        };
        let text = std::str::from_utf8(e).map_err(|_| corrupt())?;
        let f: Vec<&str> = text.split('\t').collect();
        match f.as_slice() {
            ["next", s, n] => Ok(TxnEntry::Next {
                subtask: s.parse().map_err(|_| corrupt())?,
                next: n.parse().map_err(|_| corrupt())?,
            }),
            ["pending", c, s, n, pid, epoch] => Ok(TxnEntry::Pending(PendingTxn {
                checkpoint: CheckpointId(c.parse().map_err(|_| corrupt())?),
                subtask: s.parse().map_err(|_| corrupt())?,
                n: n.parse().map_err(|_| corrupt())?,
                producer_id: pid.parse().map_err(|_| corrupt())?,
                epoch: epoch.parse().map_err(|_| corrupt())?,
            })),
            _ => Err(corrupt()),
        }
    }
}

/// What a subtask does when it starts, before it writes anything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Transactions to commit (their checkpoint completed), in checkpoint order.
    pub commit: Vec<PendingTxn>,
    /// For each subtask it answers for, the id number from which to fence ids until one was never used; its own
    /// first.
    pub fence_from: Vec<(u32, u64)>,
    /// Whether no state was restored: ids of subtasks `subtask + k·parallelism` (k ≥ 1) a run at a higher
    /// parallelism may have used are looked for too (fenced while their id number 0 was used).
    pub look_beyond: bool,
}

/// What subtask `subtask` of `parallelism` does with the restored `entries` (`None`: nothing was restored).
pub fn plan_recovery(entries: Option<&[TxnEntry]>, subtask: u32, parallelism: u32) -> Recovery {
    let Some(entries) = entries else {
        return Recovery { commit: vec![], fence_from: vec![(subtask, 0)], look_beyond: true };
    };
    let mine = |s: u32| s % parallelism.max(1) == subtask;
    let mut commit: Vec<PendingTxn> = entries
        .iter()
        .filter_map(|e| match e {
            TxnEntry::Pending(p) if mine(p.subtask) => Some(p.clone()),
            _ => None,
        })
        .collect();
    commit.sort_by_key(|p| (p.checkpoint, p.subtask, p.n));
    commit.dedup();
    let mut fence_from: Vec<(u32, u64)> = Vec::new();
    for e in entries {
        if let TxnEntry::Next { subtask: s, next } = *e {
            if !mine(s) {
                continue;
            }
            match fence_from.iter_mut().find(|(t, _)| *t == s) {
                Some((_, n)) => *n = (*n).max(next),
                None => fence_from.push((s, next)),
            }
        }
    }
    // Ids a listed transaction used are behind the fence's start, whatever the entries say.
    for p in &commit {
        match fence_from.iter_mut().find(|(t, _)| *t == p.subtask) {
            Some((_, n)) => *n = (*n).max(p.n + 1),
            None => fence_from.push((p.subtask, p.n + 1)),
        }
    }
    if !fence_from.iter().any(|(s, _)| *s == subtask) {
        // A subtask new to the job (a scale-up): its ids were never used, unless by a run the state forgot.
        fence_from.push((subtask, 0));
    }
    fence_from.sort_by_key(|&(s, _)| (s != subtask, s));
    Recovery { commit, fence_from, look_beyond: false }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(checkpoint: u64, subtask: u32, n: u64) -> TxnEntry {
        TxnEntry::Pending(PendingTxn {
            checkpoint: CheckpointId(checkpoint),
            subtask,
            n,
            producer_id: 100 + n as i64,
            epoch: 1,
        })
    }

    fn next(subtask: u32, next: u64) -> TxnEntry {
        TxnEntry::Next { subtask, next }
    }

    #[test]
    fn entries_round_trip_and_a_corrupt_one_is_an_error() {
        for e in [
            next(3, 17),
            pending(9, 2, 5),
            TxnEntry::Pending(PendingTxn {
                checkpoint: CheckpointId(1),
                subtask: 0,
                n: 0,
                producer_id: -1,
                epoch: i16::MAX,
            }),
        ] {
            assert_eq!(TxnEntry::decode(&e.encode(), "sink").unwrap(), e);
        }
        for bad in ["next\t1", "pending\t1\t2\t3\t4\tx", "open\t1\t2", ""] {
            let err = TxnEntry::decode(bad.as_bytes(), "kafka-sink \"out\"").unwrap_err().to_string();
            assert!(err.contains("kafka-sink \"out\"") && err.contains("corrupt"), "{err}");
        }
    }

    #[test]
    fn a_fresh_start_fences_its_own_ids_from_the_first_and_looks_beyond() {
        let r = plan_recovery(None, 1, 3);
        assert_eq!(r, Recovery { commit: vec![], fence_from: vec![(1, 0)], look_beyond: true });
    }

    #[test]
    fn a_restore_at_the_same_parallelism_commits_and_fences_its_own() {
        let entries = vec![next(0, 4), pending(7, 0, 3), next(1, 9), pending(7, 1, 8), pending(6, 1, 7)];
        let r = plan_recovery(Some(&entries), 1, 2);
        let TxnEntry::Pending(a) = pending(6, 1, 7) else { unreachable!() };
        let TxnEntry::Pending(b) = pending(7, 1, 8) else { unreachable!() };
        assert_eq!(r, Recovery { commit: vec![a, b], fence_from: vec![(1, 9)], look_beyond: false });
    }

    #[test]
    fn a_scale_down_answers_for_the_old_subtasks_and_a_scale_up_starts_new_ones_at_zero() {
        let entries = vec![next(0, 4), pending(7, 0, 3), next(1, 9), next(2, 2), pending(7, 2, 1)];
        // 3 → 1: subtask 0 answers for all three, its own first.
        let r = plan_recovery(Some(&entries), 0, 1);
        assert_eq!(r.commit.iter().map(|p| (p.subtask, p.n)).collect::<Vec<_>>(), vec![(0, 3), (2, 1)]);
        assert_eq!(r.fence_from, vec![(0, 4), (1, 9), (2, 2)]);
        // 3 → 2: subtask 0 answers for 0 and 2, subtask 1 for 1.
        assert_eq!(plan_recovery(Some(&entries), 0, 2).fence_from, vec![(0, 4), (2, 2)]);
        assert_eq!(plan_recovery(Some(&entries), 1, 2).fence_from, vec![(1, 9)]);
        // 3 → 5: subtasks 3 and 4 are new.
        let r = plan_recovery(Some(&entries), 4, 5);
        assert_eq!(r, Recovery { commit: vec![], fence_from: vec![(4, 0)], look_beyond: false });
    }

    #[test]
    fn a_listed_transaction_is_never_fenced_even_where_no_position_names_it() {
        // Positions of an older snapshot of the same subtask (a union of several) never move the fence back.
        let entries = vec![next(0, 2), next(0, 5), pending(4, 0, 6)];
        let r = plan_recovery(Some(&entries), 0, 1);
        assert_eq!(r.fence_from, vec![(0, 7)]);
        assert_eq!(r.commit.len(), 1);
    }
}
