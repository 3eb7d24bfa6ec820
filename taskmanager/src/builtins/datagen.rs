//! `datagen`: record `i` has key `splitmix64(seed + i) mod keys` (8 big-endian bytes) and value 1. The
//! sequence is cut into `splits` contiguous ranges, assigned to subtasks round-robin; each split's next index
//! is kept in operator list state, so the source resumes exactly where the checkpoint left it.

use crate::api::operator::{InitContext, OperatorError, SnapshotContext, Source, SourceStatus};
use crate::api::record::{Key, Record, Value};
use std::time::{Duration, Instant};
use weir_common::builtin::DatagenConfig;
use weir_common::datagen::{key_of, split_range};

const STATE: &str = "splits";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Split {
    id: u32,
    next: u64,
    end: u64,
}

/// The datagen source.
pub struct Datagen {
    cfg: DatagenConfig,
    splits: Vec<Split>,
    current: usize,
    rate_per_subtask: f64,
    started: Option<Instant>,
    emitted: u64,
}

impl Datagen {
    /// A source with the given config.
    pub fn new(cfg: DatagenConfig) -> Self {
        Datagen { cfg, splits: Vec::new(), current: 0, rate_per_subtask: 0.0, started: None, emitted: 0 }
    }
}

impl Source for Datagen {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        let p = ctx.info.parallelism;
        self.rate_per_subtask = self.cfg.rate_per_sec as f64 / p as f64;
        let restored = ctx.operator_state.list_state(STATE)?;
        if ctx.restored {
            for e in restored.iter() {
                if e.len() != 12 {
                    return Err(OperatorError::Other(format!("datagen: corrupt split state of {} bytes", e.len())));
                }
                let id = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
                let next = u64::from_le_bytes(e[4..12].try_into().map_err(|_| OperatorError::Other("split".into()))?);
                let (_, end) = split_range(id, self.cfg.splits, self.cfg.count);
                self.splits.push(Split { id, next, end });
            }
        } else {
            for id in (ctx.info.subtask.0..self.cfg.splits).step_by(p as usize) {
                let (start, end) = split_range(id, self.cfg.splits, self.cfg.count);
                self.splits.push(Split { id, next: start, end });
            }
        }
        Ok(())
    }

    fn poll(&mut self, out: &mut Vec<Record>, max: usize) -> Result<SourceStatus, OperatorError> {
        let mut budget = max;
        if self.rate_per_subtask > 0.0 {
            let started = *self.started.get_or_insert_with(Instant::now);
            let allowed = (started.elapsed().as_secs_f64() * self.rate_per_subtask) as u64 + 1;
            if self.emitted >= allowed {
                let wait = (self.emitted + 1) as f64 / self.rate_per_subtask - started.elapsed().as_secs_f64();
                return Ok(SourceStatus::Idle(Duration::from_secs_f64(wait.clamp(0.0005, 0.1))));
            }
            budget = budget.min((allowed - self.emitted) as usize);
        }
        while budget > 0 {
            let Some(split) = self.splits.get_mut(self.current) else {
                return Ok(if out.is_empty() { SourceStatus::Finished } else { SourceStatus::More });
            };
            if split.next >= split.end {
                self.current += 1;
                continue;
            }
            let n = budget.min((split.end - split.next).min(usize::MAX as u64) as usize);
            for i in split.next..split.next + n as u64 {
                let k = key_of(self.cfg.seed, i, self.cfg.keys);
                out.push(Record { key: Key::from_slice(&k.to_be_bytes()), value: Value::I64(1) });
            }
            split.next += n as u64;
            budget -= n;
            self.emitted += n as u64;
        }
        Ok(SourceStatus::More)
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext<'_>) -> Result<(), OperatorError> {
        let list = ctx.operator_state.list_state(STATE)?;
        list.clear();
        for s in &self.splits {
            let mut e = Vec::with_capacity(12);
            e.extend_from_slice(&s.id.to_le_bytes());
            e.extend_from_slice(&s.next.to_le_bytes());
            list.push(e);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::operator::RuntimeInfo;
    use weir_common::ids::{CheckpointId, SubtaskIndex};
    use weir_common::keygroup::KeyGroupRange;
    use weir_state::OperatorStateStore;

    fn info(subtask: u32, p: u32) -> RuntimeInfo {
        RuntimeInfo {
            uid: "src".into(),
            job_id: "j".into(),
            attempt: 1,
            subtask: SubtaskIndex(subtask),
            parallelism: p,
            max_parallelism: 128,
            key_group_range: KeyGroupRange { start: 0, end: 127 },
        }
    }

    fn drain(src: &mut Datagen, limit: usize) -> Result<Vec<Record>, OperatorError> {
        let mut all = Vec::new();
        while all.len() < limit {
            let mut out = Vec::new();
            if src.poll(&mut out, 7.min(limit - all.len()))? == SourceStatus::Finished {
                break;
            }
            all.extend(out);
        }
        Ok(all)
    }

    #[test]
    fn subtasks_cover_the_sequence_and_resume_from_state() -> Result<(), OperatorError> {
        let cfg = DatagenConfig { count: Some(1000), keys: 10, seed: 3, rate_per_sec: 0, splits: 16 };
        let mut counts = vec![0u64; 10];
        for sub in 0..3 {
            let mut store = OperatorStateStore::new();
            let mut src = Datagen::new(cfg.clone());
            let i = info(sub, 3);
            src.initialize_state(&mut InitContext {
                info: &i,
                restored: false,
                operator_state: &mut store,
                keyed: None,
            })?;
            let first = drain(&mut src, 50)?;
            src.snapshot_state(&mut SnapshotContext {
                checkpoint_id: CheckpointId(1),
                timestamp_ms: 0,
                operator_state: &mut store,
            })?;
            let mut again = Datagen::new(cfg.clone());
            again.initialize_state(&mut InitContext {
                info: &i,
                restored: true,
                operator_state: &mut store,
                keyed: None,
            })?;
            for r in first.iter().chain(drain(&mut again, usize::MAX)?.iter()) {
                counts[u64::from_be_bytes(r.key.as_slice().try_into().unwrap()) as usize] += 1;
            }
        }
        assert_eq!(counts, weir_common::datagen::expected_counts(3, 1000, 10));
        Ok(())
    }
}
