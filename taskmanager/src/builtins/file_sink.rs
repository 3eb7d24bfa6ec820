//! `file-sink`: exactly-once text files of `key,value` lines.
//!
//! Records go to a hidden in-progress file (`.part-<job>-<subtask>-<attempt>-<seq>.inprogress`). At a
//! checkpoint barrier the file is closed and becomes *pending* for that checkpoint (kept in operator state);
//! when the checkpoint completes it is renamed to `part-<job>-<subtask>-<attempt>-<seq>` and so becomes
//! visible. The job id in the name keeps jobs that share a directory apart. Because
//! the completion notification is best effort, a restored sink first commits every pending file its state
//! names (renames are idempotent: an already committed file is skipped), then deletes this subtask's other
//! hidden files, which belong to attempts that never completed a checkpoint. No file is ever committed twice.
//!
//! No record is committed twice either when the job manager falls back to an older checkpoint (the newest
//! one's `_metadata` was unreadable): the files committed by the checkpoints after the one restored from are
//! already visible, and the replay would write their records again. Each snapshot records the sink's position
//! (attempt and next file number); a restored sink reads the lines of the visible files past that position
//! and drops that many equal lines from what it receives next. With a deterministic source the replay holds
//! exactly those records again (barriers align, so the set of records between two checkpoints is fixed even
//! where the order across channels is not). Lines still to drop are kept in the sink's state, so a further
//! failure during the replay loses nothing.

use crate::commit::{attempt_and_number, hidden_name, PendingFiles};
use crate::operator::{Collector, InitContext, Operator, OperatorError, ProcessContext, SnapshotContext};
use crate::record::Record;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use weir_common::builtin::FileSinkConfig;
use weir_common::ids::CheckpointId;

const STATE: &str = "pending-files";
/// One element, `<attempt>-<next file number>`: the files this subtask had created at the snapshot.
const POSITION_STATE: &str = "position";
/// Lines a replay after a fallback must not write again (one element, the lines concatenated).
const REPLAYED_STATE: &str = "replayed-lines";

struct InProgress {
    name: String,
    out: BufWriter<File>,
}

/// The exactly-once file sink.
pub struct FileSink {
    dir: PathBuf,
    prefix: String,
    seq: u64,
    current: Option<InProgress>,
    pending: PendingFiles,
    line: String,
    attempt: u32,
    /// Lines (with their newline) still to drop from the input, with how many times each.
    replayed: HashMap<String, u32>,
}

impl FileSink {
    /// A sink writing under `cfg.path`.
    pub fn new(cfg: FileSinkConfig) -> Self {
        FileSink {
            dir: PathBuf::from(&cfg.path),
            prefix: String::new(),
            seq: 0,
            current: None,
            pending: PendingFiles::new(&cfg.path),
            line: String::new(),
            attempt: 0,
            replayed: HashMap::new(),
        }
    }

    /// Whether a line of input was already committed by a checkpoint after the one restored from.
    fn already_committed(&mut self, line: &str) -> bool {
        match self.replayed.get_mut(line) {
            Some(n) => {
                *n -= 1;
                if *n == 0 {
                    self.replayed.remove(line);
                }
                true
            }
            None => false,
        }
    }

    /// Counts each line of `text` (with its newline) as one more to drop from the input.
    fn count_replayed(&mut self, text: &str) {
        for line in text.split_inclusive('\n') {
            *self.replayed.entry(line.to_string()).or_insert(0) += 1;
        }
    }

    /// After a restore: the lines of visible files of this subtask created after `position` (by a later file
    /// number of the same attempt, or by a later attempt), i.e. committed by checkpoints newer than the one
    /// restored from.
    fn lines_past(&mut self, file_prefix: &str, position: (u32, u64)) -> Result<(), OperatorError> {
        let entries =
            std::fs::read_dir(&self.dir).map_err(|e| OperatorError::io(format!("list {}", self.dir.display()), e))?;
        let mut files = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((attempt, seq)) = name.strip_prefix(file_prefix).and_then(attempt_and_number) else { continue };
            if (attempt, seq) < position {
                continue;
            }
            let text = std::fs::read_to_string(entry.path())
                .map_err(|e| OperatorError::io(format!("read {}", entry.path().display()), e))?;
            self.count_replayed(&text);
            files += 1;
        }
        if files > 0 {
            tracing::warn!(files, lines = self.replayed.values().map(|&n| n as u64).sum::<u64>(),
                "restored from an older checkpoint than the newest committed output; its records will not be written again");
        }
        Ok(())
    }

    fn writer(&mut self) -> Result<&mut BufWriter<File>, OperatorError> {
        if self.current.is_none() {
            let name = format!("{}{}", self.prefix, self.seq);
            self.seq += 1;
            let path = self.dir.join(hidden_name(&name));
            let file = File::create(&path).map_err(|e| OperatorError::io(format!("create {}", path.display()), e))?;
            self.current = Some(InProgress { name, out: BufWriter::with_capacity(256 << 10, file) });
        }
        match self.current.as_mut() {
            Some(c) => Ok(&mut c.out),
            None => Err(OperatorError::Other("file-sink: no open file".into())),
        }
    }
}

impl Operator for FileSink {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| OperatorError::io(format!("create {}", self.dir.display()), e))?;
        self.prefix = format!("part-{}-{}-{}-", ctx.info.job_id, ctx.info.subtask.0, ctx.info.attempt);
        self.attempt = ctx.info.attempt;
        let subtask_prefix = format!("part-{}-{}-", ctx.info.job_id, ctx.info.subtask.0);
        if ctx.restored {
            let restored = ctx.operator_state.list_state(STATE)?.clone();
            self.pending.restore_and_commit(&restored, "file-sink")?;
            let corrupt = || OperatorError::Other("file-sink: corrupt position in restored state".into());
            for e in std::mem::take(ctx.operator_state.list_state(REPLAYED_STATE)?) {
                self.count_replayed(std::str::from_utf8(&e).map_err(|_| corrupt())?);
            }
            if let Some(p) = ctx.operator_state.list_state(POSITION_STATE)?.first().cloned() {
                let p = std::str::from_utf8(&p).ok().and_then(attempt_and_number).ok_or_else(corrupt)?;
                self.lines_past(&subtask_prefix, p)?;
            }
        }
        self.pending.remove_uncommitted(&subtask_prefix, ctx.info.attempt)
    }

    fn process_batch(
        &mut self,
        records: &[Record],
        _: &mut ProcessContext<'_>,
        _: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        if records.is_empty() {
            return Ok(());
        }
        let mut line = std::mem::take(&mut self.line);
        // Replaying after a fallback: lines committed already are dropped, the rest written.
        let replaying = !self.replayed.is_empty();
        for r in records {
            line.clear();
            r.write_text_line(&mut line);
            if replaying && self.already_committed(&line) {
                continue;
            }
            self.writer()?.write_all(line.as_bytes()).map_err(|e| OperatorError::io("write sink file", e))?;
        }
        self.line = line;
        Ok(())
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext<'_>) -> Result<(), OperatorError> {
        if let Some(mut cur) = self.current.take() {
            cur.out.flush().map_err(|e| OperatorError::io("flush sink file", e))?;
            cur.out.get_ref().sync_all().map_err(|e| OperatorError::io("sync sink file", e))?;
            self.pending.add(ctx.checkpoint_id.0, cur.name);
        }
        *ctx.operator_state.list_state(STATE)? = self.pending.to_state();
        *ctx.operator_state.list_state(POSITION_STATE)? = vec![format!("{}-{}", self.attempt, self.seq).into_bytes()];
        let replayed = ctx.operator_state.list_state(REPLAYED_STATE)?;
        replayed.clear();
        if !self.replayed.is_empty() {
            let mut blob = Vec::new();
            for (line, &n) in &self.replayed {
                for _ in 0..n {
                    blob.extend_from_slice(line.as_bytes());
                }
            }
            replayed.push(blob);
        }
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<(), OperatorError> {
        self.pending.commit_up_to(id.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::RuntimeInfo;
    use std::path::Path;
    use weir_common::ids::SubtaskIndex;
    use weir_common::keygroup::KeyGroupRange;
    use weir_state::OperatorStateStore;

    fn visible(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect();
        v.sort();
        v
    }

    /// Subtask 0 of sink `out` of job `j`, in `attempt`.
    fn info(attempt: u32) -> RuntimeInfo {
        RuntimeInfo {
            uid: "out".into(),
            job_id: "j".into(),
            attempt,
            subtask: SubtaskIndex(0),
            parallelism: 1,
            max_parallelism: 128,
            key_group_range: KeyGroupRange { start: 0, end: 127 },
        }
    }

    #[test]
    fn commits_on_completion_and_on_restore_once() -> Result<(), OperatorError> {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = FileSinkConfig { path: tmp.path().display().to_string() };
        let i1 = info(1);
        let mut store = OperatorStateStore::new();
        let mut sink = FileSink::new(cfg.clone());
        sink.initialize_state(&mut InitContext {
            info: &i1,
            restored: false,
            operator_state: &mut store,
            keyed: None,
        })?;
        let mut pc = ProcessContext { info: &i1, keyed: None };
        let mut nothing = |_: Vec<Record>| Ok(());
        sink.process_batch(&[Record::new_i64(&5u64.to_be_bytes(), 3)], &mut pc, &mut Collector::new(&mut nothing))?;
        sink.snapshot_state(&mut SnapshotContext {
            checkpoint_id: CheckpointId(1),
            timestamp_ms: 0,
            operator_state: &mut store,
        })?;
        assert!(visible(tmp.path()).is_empty(), "nothing is visible before the checkpoint completes");
        // Data after the checkpoint: lost with the failure, never committed.
        sink.process_batch(&[Record::new_i64(&6u64.to_be_bytes(), 1)], &mut pc, &mut Collector::new(&mut nothing))?;
        drop(sink); // the task manager dies before the notification arrives

        // Another job writing to the same directory: its in-progress file is not ours to remove.
        std::fs::write(tmp.path().join(".part-other-0-1-0.inprogress"), "9,9\n").unwrap();
        let i2 = info(2);
        let mut restored = FileSink::new(cfg);
        restored.initialize_state(&mut InitContext {
            info: &i2,
            restored: true,
            operator_state: &mut store,
            keyed: None,
        })?;
        assert_eq!(visible(tmp.path()), vec!["part-j-0-1-0".to_string()]);
        assert_eq!(std::fs::read_to_string(tmp.path().join("part-j-0-1-0")).unwrap(), "5,3\n");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 2, "our leftover in-progress files are removed");
        assert!(tmp.path().join(".part-other-0-1-0.inprogress").exists());
        // A late notification for the same checkpoint does nothing.
        restored.pending.add(1, "part-j-0-1-0".into());
        restored.notify_checkpoint_complete(CheckpointId(1))?;
        assert_eq!(visible(tmp.path()).len(), 1);
        Ok(())
    }

    #[test]
    fn a_fallback_to_an_older_checkpoint_commits_no_line_twice() -> Result<(), OperatorError> {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = FileSinkConfig { path: tmp.path().display().to_string() };
        let rec = |k: u64, v: i64| Record::new_i64(&k.to_be_bytes(), v);
        let mut nothing = |_: Vec<Record>| Ok(());
        let snapshot = |sink: &mut FileSink, id: u64| -> Result<OperatorStateStore, OperatorError> {
            let mut store = OperatorStateStore::new();
            sink.snapshot_state(&mut SnapshotContext {
                checkpoint_id: CheckpointId(id),
                timestamp_ms: 0,
                operator_state: &mut store,
            })?;
            let (blob, metas) = store.snapshot();
            Ok(OperatorStateStore::restore(&blob, &metas)?)
        };
        let all_lines = |dir: &Path| -> Vec<String> {
            let mut lines: Vec<String> = visible(dir)
                .iter()
                .flat_map(|f| {
                    std::fs::read_to_string(dir.join(f)).unwrap().lines().map(str::to_string).collect::<Vec<_>>()
                })
                .collect();
            lines.sort();
            lines
        };

        let i1 = info(1);
        let mut sink = FileSink::new(cfg.clone());
        sink.initialize_state(&mut InitContext {
            info: &i1,
            restored: false,
            operator_state: &mut OperatorStateStore::new(),
            keyed: None,
        })?;
        let mut pc = ProcessContext { info: &i1, keyed: None };
        sink.process_batch(&[rec(1, 1)], &mut pc, &mut Collector::new(&mut nothing))?;
        let mut chk1 = snapshot(&mut sink, 1)?;
        sink.notify_checkpoint_complete(CheckpointId(1))?;
        // Checkpoint 2 commits two more lines; then its _metadata turns out unreadable and the job restores
        // from checkpoint 1.
        sink.process_batch(&[rec(2, 1), rec(1, 2)], &mut pc, &mut Collector::new(&mut nothing))?;
        snapshot(&mut sink, 2)?;
        sink.notify_checkpoint_complete(CheckpointId(2))?;
        drop(sink);
        assert_eq!(all_lines(tmp.path()), ["1,1", "1,2", "2,1"]);

        let i2 = info(2);
        let mut sink = FileSink::new(cfg.clone());
        sink.initialize_state(&mut InitContext { info: &i2, restored: true, operator_state: &mut chk1, keyed: None })?;
        let mut pc = ProcessContext { info: &i2, keyed: None };
        // The replay, in another order across channels, then new records.
        sink.process_batch(&[rec(1, 2)], &mut pc, &mut Collector::new(&mut nothing))?;
        let mut chk3 = snapshot(&mut sink, 3)?;
        sink.notify_checkpoint_complete(CheckpointId(3))?;
        drop(sink);
        // Another failure during the replay: what is still to drop survives in the state.
        let i3 = info(3);
        let mut sink = FileSink::new(cfg);
        sink.initialize_state(&mut InitContext { info: &i3, restored: true, operator_state: &mut chk3, keyed: None })?;
        let mut pc = ProcessContext { info: &i3, keyed: None };
        sink.process_batch(&[rec(2, 1), rec(3, 1)], &mut pc, &mut Collector::new(&mut nothing))?;
        snapshot(&mut sink, 4)?;
        sink.notify_checkpoint_complete(CheckpointId(4))?;
        assert_eq!(all_lines(tmp.path()), ["1,1", "1,2", "2,1", "3,1"], "every line exactly once");
        Ok(())
    }
}
