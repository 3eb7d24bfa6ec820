//! Who restores what: given the stored state of an operator and its new parallelism, which keyed snapshots
//! and which operator-state elements each new subtask gets. Pure functions, no I/O (the task managers read
//! the files); the one home of redistribution decisions.
//!
//! - Keyed state moves by whole key-group ranges: a new subtask gets every old snapshot whose range overlaps
//!   its own and clips them to it on restore.
//! - Operator list state (`SPLIT_DISTRIBUTE`): at the same parallelism each subtask gets its own elements
//!   back; otherwise every subtask's elements of a state are pooled in old-subtask order and cut into
//!   contiguous shares, `total / n` each and one more for `total % n` of them, the subtasks getting the extra
//!   one rotating from state to state (Flink's `RoundRobinOperatorStateRepartitioner`).
//! - Union list state: every new subtask gets every element, always.
//! - Broadcast state: new subtask `i` gets old subtask `i % old_p`'s copy.
//!
//! The job manager decides with it what each subtask of a restored job reads; the task manager's operator test
//! harness (`weir_taskmanager::testing`) restores a snapshot at another parallelism through it.
//!
//! Element offsets never need to be read here: a state whose offsets are in a file is handed out as index
//! ranges into that file, so the job manager's memory does not grow with the number of elements.

use crate::checkpoint::{
    DistributionMode, FileHandle, Offsets, OperatorCheckpoint, OperatorSubtaskState, StateMetaInfo,
};
use crate::deploy::descriptor::{ElementRef, OperatorStatePart, StatePart, SubtaskRestore};
use crate::ids::SubtaskIndex;
use crate::state::keygroup::KeyGroupRange;
use std::collections::BTreeMap;

/// Why a stored operator state cannot be assigned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssignError {
    /// The same state is stored with different distribution modes by different subtasks.
    #[error("operator state {state:?} is stored as {a:?} by one subtask and as {b:?} by another")]
    ModeConflict {
        /// State name.
        state: String,
        /// One mode.
        a: DistributionMode,
        /// The other.
        b: DistributionMode,
    },
    /// Inline offsets disagree with the element count.
    #[error("operator state {state:?} claims {elements} elements but lists {offsets} offsets")]
    OffsetCount {
        /// State name.
        state: String,
        /// Element count.
        elements: u64,
        /// Offsets listed.
        offsets: usize,
    },
    /// A new parallelism of 0 or above the number of key groups.
    #[error("parallelism {parallelism} is outside 1..={max_parallelism}")]
    Parallelism {
        /// The parallelism.
        parallelism: u32,
        /// Number of key groups.
        max_parallelism: u32,
    },
}

/// One state of one old subtask: the blob it lies in and its meta info.
struct Stored<'a> {
    file: &'a FileHandle,
    meta: &'a StateMetaInfo,
}

/// Elements `first .. first + count` of a stored state.
fn slice(s: &Stored<'_>, first: u64, count: u64) -> ElementRef {
    match &s.meta.offsets {
        Offsets::Inline(o) => ElementRef::Inline(o[first as usize..(first + count) as usize].to_vec()),
        Offsets::File(f) => ElementRef::InFile { offsets: f.clone(), first, count },
    }
}

/// Appends `part` to `out`, grouping parts of the same blob.
fn push_part(out: &mut Vec<OperatorStatePart>, file: &FileHandle, part: StatePart) {
    match out.iter_mut().find(|p| p.file == *file) {
        Some(p) => p.states.push(part),
        None => out.push(OperatorStatePart { file: file.clone(), states: vec![part] }),
    }
}

/// The watermark every new subtask restores at: the lowest of the old subtasks' (whatever their split of keys,
/// splits or channels, none of them is below it), or none if one of them had none.
fn watermark_floor(old: &[&OperatorSubtaskState]) -> Option<i64> {
    old.iter().map(|s| s.watermark).try_fold(i64::MAX, |floor, w| w.map(|w| floor.min(w))).filter(|_| !old.is_empty())
}

/// What every new subtask of one operator restores, in subtask order.
pub fn assign(
    stored: &OperatorCheckpoint,
    new_parallelism: u32,
    max_parallelism: u32,
) -> Result<Vec<SubtaskRestore>, AssignError> {
    if new_parallelism == 0 || new_parallelism > max_parallelism {
        return Err(AssignError::Parallelism { parallelism: new_parallelism, max_parallelism });
    }
    let n = new_parallelism as usize;
    let mut old: Vec<_> = stored.subtasks.iter().collect();
    old.sort_by_key(|s| s.subtask);
    let same = stored.parallelism == new_parallelism && old.len() == n;
    let serializers = stored.signature.as_ref().map(|s| s.states.clone()).unwrap_or_default();
    let mut out: Vec<SubtaskRestore> =
        (0..n).map(|_| SubtaskRestore { serializers: serializers.clone(), ..SubtaskRestore::default() }).collect();

    // Keyed state: every old snapshot overlapping the new range.
    for (i, r) in out.iter_mut().enumerate() {
        let range = KeyGroupRange::for_subtask(SubtaskIndex(i as u32), new_parallelism, max_parallelism);
        r.keyed = old
            .iter()
            .filter_map(|s| s.keyed.as_ref())
            .filter(|k| k.key_group_range.intersection(&range).is_some())
            .cloned()
            .collect();
        r.end_of_input = if same { old[i].end_of_input } else { !old.is_empty() && old.iter().all(|s| s.end_of_input) };
        r.watermark = watermark_floor(&old);
    }

    // Operator state, per state name (in name order, so the rotation is deterministic).
    let mut by_state: BTreeMap<&str, (DistributionMode, Vec<Stored<'_>>)> = BTreeMap::new();
    for s in &old {
        let Some(h) = &s.operator_state else { continue };
        for meta in &h.states {
            if let Offsets::Inline(o) = &meta.offsets {
                if o.len() as u64 != meta.elements {
                    return Err(AssignError::OffsetCount {
                        state: meta.name.clone(),
                        elements: meta.elements,
                        offsets: o.len(),
                    });
                }
            }
            let entry = by_state.entry(meta.name.as_str()).or_insert((meta.mode, Vec::new()));
            if entry.0 != meta.mode {
                return Err(AssignError::ModeConflict { state: meta.name.clone(), a: entry.0, b: meta.mode });
            }
            entry.1.push(Stored { file: &h.file, meta });
        }
    }
    // Subtasks that hold an old subtask's blob, per old subtask index (same parallelism only).
    let own_index =
        |file: &FileHandle| old.iter().position(|s| s.operator_state.as_ref().is_some_and(|h| h.file == *file));
    let mut rotation = 0usize;
    for (name, (mode, parts)) in by_state {
        let part = |s: &Stored<'_>, first: u64, count: u64| StatePart {
            name: name.to_string(),
            mode,
            elements: slice(s, first, count),
        };
        match mode {
            DistributionMode::Union => {
                for r in out.iter_mut() {
                    for s in &parts {
                        push_part(&mut r.operator_state, s.file, part(s, 0, s.meta.elements));
                    }
                }
            }
            DistributionMode::Broadcast => {
                for (i, r) in out.iter_mut().enumerate() {
                    let from = if same { Some(i) } else { Some(i % old.len().max(1)) };
                    let src = parts.iter().find(|s| own_index(s.file) == from).or_else(|| parts.first());
                    if let Some(s) = src {
                        push_part(&mut r.operator_state, s.file, part(s, 0, s.meta.elements));
                    }
                }
            }
            DistributionMode::SplitDistribute if same => {
                for s in &parts {
                    if let Some(i) = own_index(s.file) {
                        push_part(&mut out[i].operator_state, s.file, part(s, 0, s.meta.elements));
                    }
                }
            }
            DistributionMode::SplitDistribute => {
                let total: u64 = parts.iter().map(|s| s.meta.elements).sum();
                let base = total / n as u64;
                let extra = (total % n as u64) as usize;
                // Shares in subtask order; the `extra` subtasks starting at `rotation` get one more.
                let mut shares: Vec<u64> =
                    (0..n).map(|i| base + u64::from((i + n - rotation % n) % n < extra)).collect();
                rotation = (rotation + extra) % n;
                // Walk the pooled elements, handing out contiguous runs.
                let mut target = 0usize;
                for s in &parts {
                    let mut first = 0u64;
                    while first < s.meta.elements {
                        while target < n && shares[target] == 0 {
                            target += 1;
                        }
                        if target >= n {
                            break;
                        }
                        let take = shares[target].min(s.meta.elements - first);
                        push_part(&mut out[target].operator_state, s.file, part(s, first, take));
                        shares[target] -= take;
                        first += take;
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Bytes of union state every new subtask would read, times the new parallelism: what a restore at
/// `new_parallelism` costs the task managers in total.
pub fn union_fanout_bytes(stored: &OperatorCheckpoint, new_parallelism: u32) -> u64 {
    let union: u64 = stored
        .subtasks
        .iter()
        .filter_map(|s| s.operator_state.as_ref())
        .flat_map(|h| h.states.iter())
        .filter(|m| m.mode == DistributionMode::Union)
        .map(|m| m.bytes)
        .sum();
    union.saturating_mul(new_parallelism as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::{KeyedStateHandle, OperatorStateHandle, OperatorSubtaskState};
    use crate::ids::KeyGroup;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn every_new_subtask_restores_at_the_lowest_old_watermark() {
        let mut op = stored(3, 128, &[1, 1, 1], &[0, 0, 0], 10);
        assert!(assign(&op, 2, 128).unwrap().iter().all(|r| r.watermark.is_none()), "none recorded: none restored");
        for (s, w) in op.subtasks.iter_mut().zip([5_000, 3_000, 9_000]) {
            s.watermark = Some(w);
        }
        for p in [1, 3, 5] {
            assert!(assign(&op, p, 128).unwrap().iter().all(|r| r.watermark == Some(3_000)), "parallelism {p}");
        }
        // One old subtask without a watermark: it had none, so neither does any new one.
        op.subtasks[2].watermark = None;
        assert!(assign(&op, 3, 128).unwrap().iter().all(|r| r.watermark.is_none()));
    }

    /// An element's identity: (blob path, index in its state).
    type Elem = (String, u64);

    /// An old operator of `p` subtasks; subtask `i` holds `list[i]` list elements, `union[i]` union elements
    /// and a broadcast copy; states with more than `inline_max` elements keep their offsets in a file.
    fn stored(p: u32, m: u32, list: &[u64], union: &[u64], inline_max: u64) -> OperatorCheckpoint {
        let subtasks = (0..p)
            .map(|i| {
                let path = format!("j/chk-1/op/{i}/opstate");
                let meta = |name: &str, mode, n: u64, k: usize| StateMetaInfo {
                    name: name.into(),
                    mode,
                    elements: n,
                    bytes: n * 5,
                    offsets: if n > inline_max {
                        Offsets::File(FileHandle { path: format!("{path}.offsets-{k}"), size: n * 8 })
                    } else {
                        // Offsets are the element index times 5 (4-byte length + 1-byte body).
                        Offsets::Inline((0..n).map(|e| e * 5).collect())
                    },
                };
                OperatorSubtaskState {
                    subtask: SubtaskIndex(i),
                    keyed: Some(KeyedStateHandle {
                        backend: crate::checkpoint::SnapshotFormat::Rocksdb,
                        key_group_range: KeyGroupRange::for_subtask(SubtaskIndex(i), p, m),
                        files: vec![],
                        states: vec![],
                    }),
                    operator_state: Some(OperatorStateHandle {
                        file: FileHandle { path: path.clone(), size: 1 },
                        states: vec![
                            meta("list", DistributionMode::SplitDistribute, list[i as usize], 0),
                            meta("union", DistributionMode::Union, union[i as usize], 1),
                            meta("rules", DistributionMode::Broadcast, 1, 2),
                        ],
                    }),
                    end_of_input: false,
                    watermark: None,
                }
            })
            .collect();
        OperatorCheckpoint {
            kind: "k".into(),
            parallelism: p,
            subtasks,
            signature: None,
            state_config: Default::default(),
        }
    }

    /// Every (blob, index) a part of state `name` references.
    fn elements(r: &SubtaskRestore, name: &str) -> Vec<Elem> {
        let mut out = Vec::new();
        for p in &r.operator_state {
            for s in p.states.iter().filter(|s| s.name == name) {
                match &s.elements {
                    ElementRef::Inline(o) => out.extend(o.iter().map(|off| (p.file.path.clone(), off / 5))),
                    ElementRef::InFile { first, count, .. } => {
                        out.extend((*first..first + count).map(|e| (p.file.path.clone(), e)))
                    }
                }
            }
        }
        out
    }

    fn all_elements(p: u32, counts: &[u64]) -> BTreeSet<Elem> {
        (0..p).flat_map(|i| (0..counts[i as usize]).map(move |e| (format!("j/chk-1/op/{i}/opstate"), e))).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn every_key_group_and_element_lands_exactly_once(
            m in prop_oneof![Just(1u32), Just(7), Just(128), 129u32..2048],
            old_p_seed in 1u32..64,
            new_p_seed in 1u32..64,
            list_seed in proptest::collection::vec(0u64..40, 64),
            union_seed in proptest::collection::vec(0u64..6, 64),
            inline_max in prop_oneof![Just(0u64), Just(3), Just(u64::MAX)],
        ) {
            let old_p = 1 + (old_p_seed - 1) % m;
            let new_p = 1 + (new_p_seed - 1) % m;
            let list = &list_seed[..old_p as usize];
            let union = &union_seed[..old_p as usize];
            let st = stored(old_p, m, list, union, inline_max);
            let out = assign(&st, new_p, m).unwrap();
            prop_assert_eq!(out.len(), new_p as usize);

            // Key groups: each new subtask's range is covered by exactly one of its snapshots per key group,
            // and it gets no snapshot that does not overlap it.
            for (i, r) in out.iter().enumerate() {
                let range = KeyGroupRange::for_subtask(SubtaskIndex(i as u32), new_p, m);
                for kg in range.start..=range.end {
                    let n = r.keyed.iter().filter(|k| k.key_group_range.contains(KeyGroup(kg))).count();
                    prop_assert_eq!(n, 1, "key group {} of subtask {}", kg, i);
                }
                for k in &r.keyed {
                    prop_assert!(k.key_group_range.intersection(&range).is_some());
                }
            }

            // List elements: each exactly once over all subtasks; shares differ by at most one.
            let mut seen: Vec<Elem> = out.iter().flat_map(|r| elements(r, "list")).collect();
            let sizes: Vec<usize> = out.iter().map(|r| elements(r, "list").len()).collect();
            seen.sort();
            let expected: Vec<Elem> = all_elements(old_p, list).into_iter().collect();
            prop_assert_eq!(&seen, &expected);
            if old_p != new_p {
                let (lo, hi) = (sizes.iter().min().copied().unwrap_or(0), sizes.iter().max().copied().unwrap_or(0));
                prop_assert!(hi - lo <= 1, "shares {:?}", sizes);
            } else {
                for (i, r) in out.iter().enumerate() {
                    let own = format!("j/chk-1/op/{i}/opstate");
                    prop_assert!(elements(r, "list").iter().all(|(f, _)| *f == own), "same parallelism keeps its own");
                }
            }

            // Union elements: all of them on every subtask, once each.
            let all_union = all_elements(old_p, union);
            for r in &out {
                let mut u = elements(r, "union");
                u.sort();
                prop_assert_eq!(u, all_union.iter().cloned().collect::<Vec<_>>());
            }

            // Broadcast: exactly one copy per new subtask, from old subtask i % old_p.
            for (i, r) in out.iter().enumerate() {
                let b = elements(r, "rules");
                prop_assert_eq!(b, vec![(format!("j/chk-1/op/{}/opstate", i as u32 % old_p), 0)]);
            }
            prop_assert_eq!(union_fanout_bytes(&st, new_p), union.iter().sum::<u64>() * 5 * new_p as u64);
        }
    }

    #[test]
    fn rotation_moves_the_extra_elements_between_states() {
        // Two list states of 5 elements each over 2 old subtasks, restored at 3: 5 = 3 * 1 + 2, so two subtasks
        // get an extra element for the first state and the rotation hands the next state's extras on.
        let mut st = stored(2, 128, &[3, 2], &[0, 0], u64::MAX);
        for s in &mut st.subtasks {
            let h = s.operator_state.as_mut().unwrap();
            let mut second = h.states[0].clone();
            second.name = "list2".into();
            h.states.push(second);
        }
        let out = assign(&st, 3, 128).unwrap();
        let sizes = |name: &str| out.iter().map(|r| elements(r, name).len()).collect::<Vec<_>>();
        assert_eq!(sizes("list"), vec![2, 2, 1]);
        assert_eq!(sizes("list2"), vec![2, 1, 2]);
    }

    #[test]
    fn bad_input_is_an_error() {
        let st = stored(2, 128, &[1, 1], &[0, 0], u64::MAX);
        assert!(matches!(assign(&st, 0, 128), Err(AssignError::Parallelism { .. })));
        assert!(matches!(assign(&st, 129, 128), Err(AssignError::Parallelism { .. })));
        let mut conflict = st.clone();
        conflict.subtasks[1].operator_state.as_mut().unwrap().states[0].mode = DistributionMode::Union;
        assert!(matches!(assign(&conflict, 2, 128), Err(AssignError::ModeConflict { .. })));
        let mut short = st;
        short.subtasks[0].operator_state.as_mut().unwrap().states[0].elements = 9;
        assert!(matches!(assign(&short, 3, 128), Err(AssignError::OffsetCount { .. })));
    }
}
