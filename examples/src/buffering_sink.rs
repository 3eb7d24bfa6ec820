//! `buffering-sink`: Flink's `BufferingSink` (the example of the `CheckpointedFunction` documentation), with
//! its writes made transactional so that its output is exactly-once.
//!
//! # The Flink pattern
//!
//! The sink keeps incoming records in an in-memory buffer and writes them out once the buffer holds
//! `threshold` records. At each checkpoint (`snapshot_state`) it puts the buffer — the records it has
//! received but not yet written — into operator list state; a restored sink (`initialize_state` with
//! `is_restored()`) takes the buffer back. So a failure never loses a buffered record.
//!
//! # Why the plain pattern is only at-least-once
//!
//! In Flink's example the write-out goes straight to the external system. Suppose the buffer fills and is
//! written after checkpoint `n`, and the job fails before checkpoint `n + 1` completes. The job restarts from
//! checkpoint `n`: the source rewinds to its position at barrier `n` and replays every record after it, and
//! the sink gets back the buffer it had at barrier `n`. The records written after the barrier are therefore
//! written a second time — duplicates in the output. Checkpointing the buffer protects the records that were
//! *not yet* written from loss; it cannot take back the records that *were* written, because the external
//! write is not part of the checkpoint.
//!
//! # Making the write-out transactional
//!
//! Here a write-out goes to a hidden file (`.buffered-<job>-<subtask>-<attempt>-<seq>.inprogress`), which
//! readers ignore. At the next barrier `n` the files written since the previous barrier become *pending* for
//! checkpoint `n` and are listed in operator state next to the buffer. When checkpoint `n` completes
//! (`notify_checkpoint_complete`) every file pending for a checkpoint up to `n` is renamed to its visible
//! name (`buffered-<job>-<subtask>-<attempt>-<seq>`): only then are its records part of the output, and then
//! the checkpoint also covers them as consumed, so they are never replayed. A file pending for an aborted
//! checkpoint stays pending and is committed with the next completed one.
//!
//! Completion notifications are best effort (late, repeated or never), exactly as for the built-in
//! `file-sink`: a restored sink first commits every pending file its state names (the checkpoint it restored
//! from completed; renames are idempotent, an already visible file is skipped), then deletes this subtask's
//! other hidden files — written after the last completed checkpoint by an attempt that died, their records
//! are replayed. No record is lost and none is committed twice.
//!
//! At end of input the rest of the buffer is written out (below the threshold); the final checkpoint commits
//! it.
//!
//! Config: `path` (required, the directory of the committed files) and `threshold` (records per write-out,
//! default 1000). Lines are `key,value` as the `file-sink` writes them (an 8-byte key as its decimal `u64`).

use arrow_array::RecordBatch;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use weir_common::ids::CheckpointId;
use weir_common::job::kind::{
    field, field_err, ConfigField, ConfigFieldError, ConfigReader, KindInfo, OperatorConfig, Role, StateClass,
};
use weir_taskmanager::api::commit::{hidden_name, PendingFiles};
use weir_taskmanager::api::operator::{
    Collector, InitContext, Operator, OperatorError, ProcessContext, SnapshotContext,
};
use weir_taskmanager::api::record::{decode_records, encode_record, Record};

/// The kind's name in the registry.
pub const KIND: &str = "buffering-sink";
/// Records per write-out unless the config says otherwise.
pub const DEFAULT_THRESHOLD: usize = 1000;
/// Largest accepted `threshold` (the buffer lives in memory and in every checkpoint).
pub const MAX_THRESHOLD: usize = 1_000_000;

/// Operator list state with the buffered records, one encoded record per element.
const BUFFER_STATE: &str = "buffered-records";
/// Operator list state with the pending files, `<checkpoint id>\t<visible name>` per element.
const PENDING_STATE: &str = "pending-files";
/// Prefix of every file name this sink writes.
const FILE_PREFIX: &str = "buffered";

/// What the job manager learns about `buffering-sink` when a task manager with it registers.
pub fn kind_info() -> KindInfo {
    KindInfo::new(KIND, Role::Sink, false, env!("CARGO_PKG_VERSION")).with_fields(FIELDS).with_states(&[
        (BUFFER_STATE, StateClass::OperatorList, "Record"),
        (PENDING_STATE, StateClass::OperatorList, "PendingFile"),
    ])
}

/// The config fields of `buffering-sink`.
pub const FIELDS: &[ConfigField] = &[
    field("path", "the directory committed files appear in (required)"),
    field("threshold", "records buffered before they are written out (default 1000)"),
];

/// Config of `buffering-sink`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferingSinkConfig {
    /// Directory the committed files appear in.
    pub path: String,
    /// Records buffered before they are written out.
    pub threshold: usize,
}

impl BufferingSinkConfig {
    /// Reads and checks the config; an error names the field.
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, FIELDS)?;
        let path = r.string("path")?.unwrap_or_default();
        if path.trim().is_empty() {
            return Err(field_err("path", "is required (the directory to write committed files to)"));
        }
        let threshold = match r.u64("threshold")? {
            None => DEFAULT_THRESHOLD,
            Some(t) => usize::try_from(t).ok().filter(|t| (1..=MAX_THRESHOLD).contains(t)).ok_or_else(|| {
                field_err("threshold", format!("expected an integer from 1 to {MAX_THRESHOLD}, got {t}"))
            })?,
        };
        Ok(BufferingSinkConfig { path, threshold })
    }
}

fn corrupt(what: &str) -> OperatorError {
    OperatorError::UnreadableState(format!("{KIND}: corrupt {what} in restored state"))
}

/// The buffering sink; see the module docs.
pub struct BufferingSink {
    dir: PathBuf,
    threshold: usize,
    /// `buffered-<job>-<subtask>-<attempt>-`, set by `initialize_state`.
    prefix: String,
    /// Sequence number of the next file of this attempt.
    seq: u64,
    /// Records received and not yet written out.
    buffer: Vec<Record>,
    /// Hidden files written since the last barrier (visible names).
    staged: Vec<String>,
    /// Hidden files waiting for their checkpoint to complete.
    pending: PendingFiles,
    line: String,
}

impl BufferingSink {
    /// A sink writing under `cfg.path`.
    pub fn new(cfg: BufferingSinkConfig) -> Self {
        BufferingSink {
            dir: PathBuf::from(&cfg.path),
            threshold: cfg.threshold,
            prefix: String::new(),
            seq: 0,
            buffer: Vec::with_capacity(cfg.threshold),
            staged: Vec::new(),
            pending: PendingFiles::new(&cfg.path),
            line: String::new(),
        }
    }

    /// Records currently buffered.
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// Writes the buffer to a new hidden file (staged until the next barrier) and empties it.
    fn write_out(&mut self) -> Result<(), OperatorError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let name = format!("{}{}", self.prefix, self.seq);
        self.seq += 1;
        let path = self.dir.join(hidden_name(&name));
        let file = File::create(&path).map_err(|e| OperatorError::io(format!("create {}", path.display()), e))?;
        let mut out = BufWriter::with_capacity(64 << 10, file);
        let line = &mut self.line;
        for r in &self.buffer {
            line.clear();
            r.write_text_line(line);
            out.write_all(line.as_bytes()).map_err(|e| OperatorError::io(format!("write {}", path.display()), e))?;
        }
        let file =
            out.into_inner().map_err(|e| OperatorError::io(format!("write {}", path.display()), e.into_error()))?;
        file.sync_all().map_err(|e| OperatorError::io(format!("sync {}", path.display()), e))?;
        tracing::debug!(file = %name, records = self.buffer.len(), "wrote buffered records");
        self.buffer.clear();
        self.staged.push(name);
        Ok(())
    }

    fn restore(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        for e in ctx.operator_state.list_state(BUFFER_STATE)?.iter() {
            decode_records(e, 1, &mut self.buffer).map_err(|_| corrupt("buffered record"))?;
        }
        // The checkpoint we restore from completed, so everything it lists as pending is committed now.
        let restored = ctx.operator_state.list_state(PENDING_STATE)?.clone();
        self.pending.restore_and_commit(&restored, KIND)
    }
}

impl Operator for BufferingSink {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| OperatorError::io(format!("create {}", self.dir.display()), e))?;
        self.prefix = format!("{FILE_PREFIX}-{}-{}-{}-", ctx.info.job_id, ctx.info.subtask.0, ctx.info.attempt);
        if ctx.is_restored() {
            self.restore(ctx)?;
        }
        // This subtask's remaining hidden files were written after the last completed checkpoint by an attempt
        // that died; their records are replayed, so they must never become visible.
        let subtask_prefix = format!("{FILE_PREFIX}-{}-{}-", ctx.info.job_id, ctx.info.subtask.0);
        self.pending.remove_uncommitted(&subtask_prefix, ctx.info.attempt)?;
        tracing::debug!(restored = ctx.restored, buffered = self.buffer.len(), "buffering-sink initialized");
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: &RecordBatch,
        _: &mut ProcessContext<'_>,
        _: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let records = weir_taskmanager::api::batch::records(batch)?;
        for r in records {
            self.buffer.push(r.clone());
            if self.buffer.len() >= self.threshold {
                self.write_out()?;
            }
        }
        Ok(())
    }

    fn end_of_input(&mut self, _: &mut ProcessContext<'_>, _: &mut Collector<'_>) -> Result<(), OperatorError> {
        self.write_out()
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext<'_>) -> Result<(), OperatorError> {
        let id = ctx.checkpoint_id;
        for name in self.staged.drain(..) {
            self.pending.add(id, name);
        }
        *ctx.operator_state.list_state(PENDING_STATE)? = self.pending.to_state();
        let buffer = ctx.operator_state.list_state(BUFFER_STATE)?;
        buffer.clear();
        for r in &self.buffer {
            let mut e = Vec::new();
            encode_record(r, &mut e).map_err(|e| OperatorError::Records(format!("{KIND}: {e}")))?;
            buffer.push(e);
        }
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<(), OperatorError> {
        self.pending.commit_up_to(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use weir_taskmanager::testing::{Harness, OperatorHarness, Snapshot};

    type Sink = OperatorHarness<BufferingSink>;

    fn rec(key: u64) -> Record {
        Record::new_i64(&key.to_be_bytes(), 1)
    }

    fn sink(dir: &Path, threshold: usize) -> BufferingSink {
        BufferingSink::new(BufferingSinkConfig { path: dir.display().to_string(), threshold })
    }

    /// Sink `out` of job `j` in `attempt`, restored from `from` if given.
    fn open(s: BufferingSink, attempt: u32, from: Option<&Snapshot>) -> Sink {
        let h = Harness::stateless().uid("out").attempt(attempt);
        let h = match from {
            Some(snapshot) => h.restore(snapshot),
            None => h,
        };
        h.open(s).unwrap()
    }

    fn process(s: &mut Sink, keys: std::ops::Range<u64>) {
        let records: Vec<Record> = keys.map(rec).collect();
        s.process(&weir_taskmanager::api::batch::batch_of(&records).unwrap()).unwrap();
    }

    fn names(dir: &Path, hidden: bool) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.') == hidden)
            .collect();
        v.sort();
        v
    }

    fn read(dir: &Path, name: &str) -> String {
        std::fs::read_to_string(dir.join(name)).unwrap()
    }

    fn lines(keys: std::ops::Range<u64>) -> String {
        keys.map(|k| format!("{k},1\n")).collect()
    }

    #[test]
    fn config_defaults_and_errors() {
        let m = |pairs: &[(&str, &str)]| -> OperatorConfig {
            pairs.iter().map(|(k, v)| (k.to_string(), (*v).into())).collect()
        };
        let err = |pairs: &[(&str, &str)]| BufferingSinkConfig::from_map(&m(pairs)).unwrap_err().to_string();
        let c = BufferingSinkConfig::from_map(&m(&[("path", "/o")])).unwrap();
        assert_eq!(c, BufferingSinkConfig { path: "/o".into(), threshold: DEFAULT_THRESHOLD });
        assert_eq!(
            BufferingSinkConfig::from_map(&m(&[("path", "/o"), ("threshold", "2_000")])).unwrap().threshold,
            2000
        );
        assert!(err(&[]).contains("\"path\""));
        assert!(err(&[("path", "/o"), ("threshold", "0")]).contains("threshold"));
        assert!(err(&[("path", "/o"), ("treshold", "5")]).contains("treshold"));
    }

    #[test]
    fn buffers_until_the_threshold_and_writes_the_rest_at_end_of_input() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut s = open(sink(dir, 3), 1, None);
        process(&mut s, 0..2);
        assert_eq!(s.operator().buffered(), 2);
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 0, "nothing is written below the threshold");
        process(&mut s, 2..7);
        assert_eq!(s.operator().buffered(), 1);
        assert_eq!(names(dir, true), vec![".buffered-j-0-1-0.inprogress", ".buffered-j-0-1-1.inprogress"]);
        assert_eq!(read(dir, ".buffered-j-0-1-0.inprogress"), lines(0..3));
        assert_eq!(read(dir, ".buffered-j-0-1-1.inprogress"), lines(3..6));
        assert!(names(dir, false).is_empty(), "nothing is visible before a checkpoint completes");

        s.end_input().unwrap();
        assert_eq!(s.operator().buffered(), 0);
        assert_eq!(read(dir, ".buffered-j-0-1-2.inprogress"), lines(6..7));
        s.snapshot(1).unwrap();
        s.notify_checkpoint_complete(1).unwrap();
        assert_eq!(names(dir, false), vec!["buffered-j-0-1-0", "buffered-j-0-1-1", "buffered-j-0-1-2"]);
        assert!(names(dir, true).is_empty());
    }

    #[test]
    fn the_buffer_is_snapshotted_and_restored() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut s = open(sink(dir, 10), 1, None);
        process(&mut s, 0..4);
        let checkpoint = s.snapshot(1).unwrap();
        // Records after the barrier are replayed by the source after a failure: not in the state.
        process(&mut s, 4..6);
        drop(s);

        let mut s = open(sink(dir, 10), 2, Some(&checkpoint));
        assert_eq!(s.operator().buffered(), 4, "the buffer at the barrier comes back");
        process(&mut s, 4..10);
        assert_eq!(s.operator().buffered(), 0);
        assert_eq!(read(dir, ".buffered-j-0-2-0.inprogress"), lines(0..10));

        // A fresh start (no restore) begins with an empty buffer.
        let mut fresh = open(sink(dir, 10), 3, None);
        assert_eq!(fresh.operator().buffered(), 0);
    }

    #[test]
    fn files_are_committed_on_completion_and_on_restore_exactly_once() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut s = open(sink(dir, 2), 1, None);
        process(&mut s, 0..2); // file 0
        s.snapshot(1).unwrap();
        process(&mut s, 2..5); // file 1, key 4 buffered
        let at_checkpoint_2 = s.snapshot(2).unwrap();
        // Checkpoint 3 is aborted: its file stays pending.
        process(&mut s, 5..7); // file 2
        s.snapshot(3).unwrap();
        s.notify_checkpoint_aborted(3).unwrap();

        s.notify_checkpoint_complete(1).unwrap();
        assert_eq!(names(dir, false), vec!["buffered-j-0-1-0"], "only what checkpoint 1 covers is visible");
        s.notify_checkpoint_complete(1).unwrap(); // repeated: nothing changes
        assert_eq!(names(dir, false), vec!["buffered-j-0-1-0"]);
        drop(s); // dies before the notification of checkpoint 2 arrives

        // Another job writing to the same directory: its hidden file is not ours to remove.
        std::fs::write(dir.join(".buffered-other-0-1-0.inprogress"), "9,1\n").unwrap();
        let mut s = open(sink(dir, 2), 2, Some(&at_checkpoint_2));
        assert_eq!(names(dir, false), vec!["buffered-j-0-1-0", "buffered-j-0-1-1"], "pending files are committed");
        assert_eq!(read(dir, "buffered-j-0-1-1"), lines(2..4));
        assert_eq!(
            names(dir, true),
            vec![".buffered-other-0-1-0.inprogress"],
            "the file written after checkpoint 2 is removed: its records are replayed"
        );
        assert_eq!(s.operator().buffered(), 1);
        // A late notification of the old attempt's checkpoint commits nothing twice.
        s.notify_checkpoint_complete(2).unwrap();
        process(&mut s, 5..7); // replayed: key 4 (buffered) and 5 written, 6 buffered
        s.snapshot(4).unwrap();
        s.notify_checkpoint_complete(4).unwrap();
        let mut all = String::new();
        for name in names(dir, false) {
            all.push_str(&read(dir, &name));
        }
        assert_eq!(all, lines(0..6), "every record up to the last barrier once, in order");
    }
}
