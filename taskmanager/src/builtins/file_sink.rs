//! `file-sink`: exactly-once text files of `key,value` lines.
//!
//! Records go to a hidden in-progress file (`.part-<job>-<subtask>-<attempt>-<seq>.inprogress`). At a
//! checkpoint barrier the file is closed and becomes *pending* for that checkpoint (kept in operator state);
//! when the checkpoint completes it is renamed to `part-<job>-<subtask>-<attempt>-<seq>` and so becomes
//! visible. The job id in the name keeps jobs that share a directory apart. Because
//! the completion notification is best effort, a restored sink first commits every pending file its state
//! names (renames are idempotent: an already committed file is skipped), then deletes this subtask's other
//! hidden files, which belong to attempts that never completed a checkpoint. No file is ever committed twice.

use crate::commit::{hidden_name, PendingFiles};
use crate::operator::{Collector, InitContext, Operator, OperatorError, ProcessContext, SnapshotContext};
use crate::record::Record;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use weir_common::builtin::FileSinkConfig;
use weir_common::ids::CheckpointId;

const STATE: &str = "pending-files";

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
        }
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
        if ctx.restored {
            let restored = ctx.operator_state.list_state(STATE)?.clone();
            self.pending.restore_and_commit(&restored, "file-sink")?;
        }
        self.pending.remove_uncommitted(&format!("part-{}-{}-", ctx.info.job_id, ctx.info.subtask.0))
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
        let out = self.writer()?;
        for r in records {
            line.clear();
            r.write_text_line(&mut line);
            out.write_all(line.as_bytes()).map_err(|e| OperatorError::io("write sink file", e))?;
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

    #[test]
    fn commits_on_completion_and_on_restore_once() -> Result<(), OperatorError> {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = FileSinkConfig { path: tmp.path().display().to_string() };
        let info = |attempt| RuntimeInfo {
            uid: "out".into(),
            job_id: "j".into(),
            attempt,
            subtask: SubtaskIndex(0),
            parallelism: 1,
            max_parallelism: 128,
            key_group_range: KeyGroupRange { start: 0, end: 127 },
        };
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
}
