//! `file-sink`: exactly-once files of text lines — `key,value` for key/value rows, or every column of other
//! rows, as text, CSV or JSON lines (`format`, see [`super::text`]) — or of Parquet (`format: parquet`: the
//! rows' columns but the runtime's, a file per checkpoint).
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
//! already visible, and the replay would write their records again. Each snapshot records every subtask's
//! position (attempt and next file number) in union state, so a restored subtask learns them all; it reads the
//! lines of every subtask's visible files past its position and drops that many equal lines from what it
//! receives next. With a deterministic source the replay holds exactly those records again (barriers align,
//! so the set of records between two checkpoints is fixed even where the order across channels is not), but
//! not necessarily at the same sink subtask: where the sink's parallelism differs from its input's, records
//! are dealt out round-robin, so a line one subtask committed may come back to another. Each subtask therefore
//! drops any of the lines all subtasks committed past the restore point; lines it never receives stay in its
//! list, and could drop an equal line written much later (for sinks whose lines repeat; `keyed-count`'s never
//! do). Lines still to drop are kept in the sink's state, so a further failure during the replay loses nothing.
//! Parquet files are not lines: with `format: parquet` such a replay writes the rows of those newer files again
//! (the normal restore, from the newest checkpoint, commits nothing twice in any format).

use super::declare::*;
pub use super::text::FileFormat;
use super::text::LineWriter;
use crate::api::commit::{attempt_and_number, hidden_name, PendingFiles};
use crate::api::operator::{Collector, InitContext, Operator, OperatorError, ProcessContext, SnapshotContext};
use arrow_array::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use weir_common::ids::CheckpointId;

/// Config of the `file-sink`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSinkConfig {
    /// Directory the committed files appear in.
    pub path: String,
    /// How rows are written.
    pub format: FileFormat,
}

impl FileSinkConfig {
    /// The config fields it reads: what `weir kinds` lists and what any other field is refused against.
    pub const FIELDS: &'static [ConfigField] = &[
        field("path", "directory the committed files appear in (required)"),
        field("format", "text (one line per row, the default), csv, json (an object per line) or parquet"),
    ];

    /// Reads and checks a file-sink config.
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, Self::FIELDS)?;
        let path = r.string("path")?.unwrap_or_default();
        if path.trim().is_empty() {
            return Err(field_err("path", "is required (the directory to write committed files to)"));
        }
        let format = match r.string("format")?.as_deref().map(str::trim) {
            None | Some("text") => FileFormat::Text,
            Some("csv") => FileFormat::Csv,
            Some("json") => FileFormat::Json,
            Some("parquet") => FileFormat::Parquet,
            Some(other) => {
                return Err(field_err(
                    "format",
                    format!("expected text, csv, json or parquet, got {}", weir_common::text::echo(other)),
                ))
            }
        };
        Ok(FileSinkConfig { path, format })
    }
}

const STATE: &str = "pending-files";
/// One element, `<attempt>-<next file number>`: the files this subtask had created at the snapshot.
const POSITION_STATE: &str = "position";
/// Lines a replay after a fallback must not write again (one element, the lines concatenated).
const REPLAYED_STATE: &str = "replayed-lines";
/// Union list state: one element per subtask, `<subtask>-<attempt>-<next file number>`, so that a restored
/// subtask knows where every old subtask stood (see the module docs). Snapshots from before it have only
/// [`POSITION_STATE`], each subtask's own.
const POSITIONS_STATE: &str = "positions";

struct InProgress {
    name: String,
    out: BufWriter<File>,
}

/// A Parquet file being written: its name, writer and schema.
struct ParquetInProgress {
    name: String,
    writer: ArrowWriter<File>,
    schema: arrow_schema::SchemaRef,
}

/// The exactly-once file sink.
pub struct FileSink {
    dir: PathBuf,
    prefix: String,
    seq: u64,
    current: Option<InProgress>,
    parquet: Option<ParquetInProgress>,
    /// Parquet files closed since the last checkpoint (their schema changed); pending at the next one.
    closed: Vec<String>,
    pending: PendingFiles,
    line: String,
    attempt: u32,
    subtask: u32,
    /// Lines (with their newline) still to drop from the input, with how many times each.
    replayed: HashMap<String, u32>,
    format: FileFormat,
    /// How rows of the current input schema are written, and the line a file of them starts with.
    lines: Option<LineWriter>,
    header: Option<String>,
}

impl FileSink {
    /// A sink writing under `cfg.path`.
    pub fn new(cfg: FileSinkConfig) -> Self {
        FileSink {
            dir: PathBuf::from(&cfg.path),
            prefix: String::new(),
            seq: 0,
            current: None,
            parquet: None,
            closed: Vec::new(),
            pending: PendingFiles::new(&cfg.path),
            line: String::new(),
            attempt: 0,
            subtask: 0,
            replayed: HashMap::new(),
            format: cfg.format,
            lines: None,
            header: None,
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

    /// After a restore: the lines of the visible files past the positions (by a later file number of the same
    /// attempt, or by a later attempt), i.e. committed by checkpoints newer than the one restored from. The
    /// files are this job's `part-<job>-<subtask>-<attempt>-<seq>`; `positions` holds each old subtask's.
    fn lines_past(&mut self, job_prefix: &str, positions: &HashMap<u32, (u32, u64)>) -> Result<(), OperatorError> {
        let entries =
            std::fs::read_dir(&self.dir).map_err(|e| OperatorError::io(format!("list {}", self.dir.display()), e))?;
        let mut files = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((subtask, rest)) = name.strip_prefix(job_prefix).and_then(|r| r.split_once('-')) else {
                continue;
            };
            let Some(position) = subtask.parse().ok().and_then(|s: u32| positions.get(&s)) else { continue };
            let Some((attempt, seq)) = attempt_and_number(rest) else { continue };
            if (attempt, seq) < *position {
                continue;
            }
            let text = std::fs::read_to_string(entry.path())
                .map_err(|e| OperatorError::io(format!("read {}", entry.path().display()), e))?;
            // A CSV file's first line is its header, not a row.
            let rows = match self.format {
                FileFormat::Csv => text.split_once('\n').map_or("", |(_, rows)| rows),
                _ => &text,
            };
            self.count_replayed(rows);
            files += 1;
        }
        if files > 0 {
            tracing::warn!(files, lines = self.replayed.values().map(|&n| n as u64).sum::<u64>(),
                "restored from an older checkpoint than the newest committed output; its records will not be written again");
        }
        Ok(())
    }

    fn write_rows(&mut self, lines: &mut LineWriter, batch: &RecordBatch) -> Result<(), OperatorError> {
        let mut line = std::mem::take(&mut self.line);
        // Replaying after a fallback: lines committed already are dropped, the rest written.
        let replaying = !self.replayed.is_empty();
        for row in 0..batch.num_rows() {
            line.clear();
            lines.write_row(batch, row, &mut line);
            if replaying && self.already_committed(&line) {
                continue;
            }
            self.writer()?.write_all(line.as_bytes()).map_err(|e| OperatorError::io("write sink file", e))?;
        }
        self.line = line;
        Ok(())
    }

    /// Writes the batch's columns but the runtime's to the open Parquet file (a new one for a new schema).
    fn write_parquet(&mut self, batch: &RecordBatch) -> Result<(), OperatorError> {
        let keep: Vec<usize> = (0..batch.num_columns())
            .filter(|i| !crate::api::batch::is_system_column(batch.schema().field(*i).name()))
            .collect();
        let rows = batch.project(&keep).map_err(|e| OperatorError::Records(format!("file-sink: {e}")))?;
        if self.parquet.as_ref().is_some_and(|p| p.schema != rows.schema()) {
            self.close_parquet()?;
        }
        if self.parquet.is_none() {
            let name = format!("{}{}", self.prefix, self.seq);
            self.seq += 1;
            let path = self.dir.join(hidden_name(&name));
            let file = File::create(&path).map_err(|e| OperatorError::io(format!("create {}", path.display()), e))?;
            let props = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
            let writer = ArrowWriter::try_new(file, rows.schema(), Some(props))
                .map_err(|e| OperatorError::Records(format!("file-sink: parquet: {e}")))?;
            self.parquet = Some(ParquetInProgress { name, writer, schema: rows.schema() });
        }
        let Some(p) = self.parquet.as_mut() else { unreachable!("opened above") };
        p.writer.write(&rows).map_err(|e| OperatorError::Records(format!("file-sink: parquet: {e}")))
    }

    /// Finishes the open Parquet file (its footer), syncs it, and lists it for the next checkpoint.
    fn close_parquet(&mut self) -> Result<(), OperatorError> {
        let Some(p) = self.parquet.take() else { return Ok(()) };
        let file = p.writer.into_inner().map_err(|e| OperatorError::Records(format!("file-sink: parquet: {e}")))?;
        file.sync_all().map_err(|e| OperatorError::io("sync sink file", e))?;
        self.closed.push(p.name);
        Ok(())
    }

    fn writer(&mut self) -> Result<&mut BufWriter<File>, OperatorError> {
        if self.current.is_none() {
            let name = format!("{}{}", self.prefix, self.seq);
            self.seq += 1;
            let path = self.dir.join(hidden_name(&name));
            let file = File::create(&path).map_err(|e| OperatorError::io(format!("create {}", path.display()), e))?;
            let mut out = BufWriter::with_capacity(256 << 10, file);
            if let Some(header) = &self.header {
                out.write_all(header.as_bytes()).map_err(|e| OperatorError::io("write sink file", e))?;
            }
            self.current = Some(InProgress { name, out });
        }
        match self.current.as_mut() {
            Some(c) => Ok(&mut c.out),
            None => Err(OperatorError::Misuse("file-sink: no open file".into())),
        }
    }
}

impl Operator for FileSink {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| OperatorError::io(format!("create {}", self.dir.display()), e))?;
        self.prefix = format!("part-{}-{}-{}-", ctx.info.job_id, ctx.info.subtask.0, ctx.info.attempt);
        self.attempt = ctx.info.attempt;
        self.subtask = ctx.info.subtask.0;
        let job_prefix = format!("part-{}-", ctx.info.job_id);
        let subtask_prefix = format!("part-{}-{}-", ctx.info.job_id, ctx.info.subtask.0);
        if ctx.restored {
            let restored = ctx.operator_state.list_state(STATE)?.clone();
            self.pending.restore_and_commit(&restored, "file-sink")?;
            let corrupt = || OperatorError::UnreadableState("file-sink: corrupt position in restored state".into());
            for e in std::mem::take(ctx.operator_state.list_state(REPLAYED_STATE)?) {
                self.count_replayed(std::str::from_utf8(&e).map_err(|_| corrupt())?);
            }
            // Every old subtask's position (union state); a snapshot from before it has only this subtask's.
            let mut positions = HashMap::new();
            for e in std::mem::take(ctx.operator_state.union_list_state(POSITIONS_STATE)?) {
                let text = std::str::from_utf8(&e).map_err(|_| corrupt())?;
                let (subtask, rest) = text.split_once('-').ok_or_else(corrupt)?;
                let position = attempt_and_number(rest).ok_or_else(corrupt)?;
                positions.insert(subtask.parse::<u32>().map_err(|_| corrupt())?, position);
            }
            if positions.is_empty() {
                if let Some(p) = ctx.operator_state.list_state(POSITION_STATE)?.first().cloned() {
                    let p = std::str::from_utf8(&p).ok().and_then(attempt_and_number).ok_or_else(corrupt)?;
                    positions.insert(self.subtask, p);
                }
            }
            // Parquet files are not lines: a replay after a fallback to an older checkpoint writes its rows
            // again (the module docs).
            if !positions.is_empty() && self.format != FileFormat::Parquet {
                self.lines_past(&job_prefix, &positions)?;
            }
        }
        self.pending.remove_uncommitted(&subtask_prefix, ctx.info.attempt)
    }

    fn process_batch(
        &mut self,
        batch: &RecordBatch,
        _: &mut ProcessContext<'_>,
        _: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if self.format == FileFormat::Parquet {
            return self.write_parquet(batch);
        }
        let mut lines = match self.lines.take() {
            Some(l) if l.writes(batch) => l,
            _ => {
                let lines = LineWriter::new(batch, self.format)?;
                self.header = lines.header();
                // Rows of a new schema under a header of their own (CSV): a new file starts with it already.
                if let (Some(header), Some(cur)) = (&self.header, self.current.as_mut()) {
                    cur.out.write_all(header.as_bytes()).map_err(|e| OperatorError::io("write sink file", e))?;
                }
                lines
            }
        };
        let result = self.write_rows(&mut lines, batch);
        self.lines = Some(lines);
        result
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext<'_>) -> Result<(), OperatorError> {
        if let Some(mut cur) = self.current.take() {
            cur.out.flush().map_err(|e| OperatorError::io("flush sink file", e))?;
            cur.out.get_ref().sync_all().map_err(|e| OperatorError::io("sync sink file", e))?;
            self.pending.add(ctx.checkpoint_id, cur.name);
        }
        self.close_parquet()?;
        for name in std::mem::take(&mut self.closed) {
            self.pending.add(ctx.checkpoint_id, name);
        }
        *ctx.operator_state.list_state(STATE)? = self.pending.to_state();
        *ctx.operator_state.list_state(POSITION_STATE)? = vec![format!("{}-{}", self.attempt, self.seq).into_bytes()];
        *ctx.operator_state.union_list_state(POSITIONS_STATE)? =
            vec![format!("{}-{}-{}", self.subtask, self.attempt, self.seq).into_bytes()];
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
        self.pending.commit_up_to(id)
    }
}

/// The `file-sink` kind (DESIGN §10): exactly-once text files.
pub struct FileSinkKind;

impl Kind for FileSinkKind {
    type Config = FileSinkConfig;

    fn info(&self) -> KindInfo {
        builtin_info(
            "file-sink",
            Role::Sink,
            false,
            "Exactly-once files in a directory (text, CSV, JSON or Parquet)",
            FileSinkConfig::FIELDS,
        )
        .with_states(&[("pending-files", StateClass::OperatorList, "PendingFile")])
    }

    fn signature(&self) -> Option<StateSignature> {
        // `<checkpoint>\t<file>` lines, `<attempt>-<seq>`, and lines already written.
        Some(
            StateSignature::unkeyed()
                .operator_list::<String>("pending-files")
                .operator_list::<String>("position")
                .operator_list::<Vec<u8>>("replayed-lines"),
        )
    }

    fn config(&self, config: &OperatorConfig) -> Result<FileSinkConfig, ConfigFieldError> {
        FileSinkConfig::from_map(config)
    }

    fn build(&self, config: FileSinkConfig) -> Result<Instance, InvalidConfig> {
        Ok(Instance::Operator(Box::new(FileSink::new(config))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::batch::batch_of;
    use crate::api::record::Record;
    use crate::testing::{Harness, OperatorHarness, Snapshot};
    use std::path::Path;

    fn visible(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect();
        v.sort();
        v
    }

    /// A sink subtask running as a task would.
    type Sink = OperatorHarness<FileSink>;

    /// Sink `out` of job `j` (subtask 0 of 1), in `attempt`.
    fn harness(attempt: u32) -> Harness {
        Harness::stateless().uid("out").attempt(attempt)
    }

    /// A sink in `format` over a fresh directory, initialized as attempt 1.
    fn sink_in(dir: &Path, format: FileFormat) -> Result<Sink, OperatorError> {
        harness(1).open(FileSink::new(FileSinkConfig { path: dir.display().to_string(), format }))
    }

    fn write(sink: &mut Sink, records: &[Record]) -> Result<(), OperatorError> {
        sink.process(&batch_of(records)?)
    }

    #[test]
    fn csv_files_start_with_their_header_and_parquet_files_hold_the_rows() -> Result<(), OperatorError> {
        let rec = |k: u64, v: i64| Record::new_i64(&k.to_be_bytes(), v).at(v);
        let tmp = tempfile::tempdir().unwrap();
        let mut sink = sink_in(tmp.path(), FileFormat::Csv)?;
        write(&mut sink, &[rec(1, 10), rec(2, 20)])?;
        sink.snapshot(1)?;
        write(&mut sink, &[rec(3, 30)])?;
        sink.snapshot(2)?;
        sink.notify_checkpoint_complete(2)?;
        let texts: Vec<String> =
            visible(tmp.path()).iter().map(|f| std::fs::read_to_string(tmp.path().join(f)).unwrap()).collect();
        assert_eq!(texts, ["key,value\n1,10\n2,20\n", "key,value\n3,30\n"]);

        let tmp = tempfile::tempdir().unwrap();
        let mut sink = sink_in(tmp.path(), FileFormat::Parquet)?;
        write(&mut sink, &[rec(1, 10), rec(2, 20)])?;
        write(&mut sink, &[rec(3, 30)])?;
        sink.snapshot(1)?;
        assert!(visible(tmp.path()).is_empty(), "nothing visible before the checkpoint completes");
        sink.notify_checkpoint_complete(1)?;
        let files = visible(tmp.path());
        assert_eq!(files.len(), 1, "{files:?}");
        let file = File::open(tmp.path().join(&files[0])).unwrap();
        let reader =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap();
        let mut read = Vec::new();
        for b in reader {
            let b = b.unwrap();
            assert!(b.schema().column_with_name("_event_time").is_none(), "the runtime's columns are not written");
            let rows = crate::api::batch::KvRows::new(&b)?;
            read.extend((0..rows.len()).map(|i| (rows.key(i).to_vec(), rows.value_i64(i))));
        }
        let expected: Vec<_> =
            [(1u64, 10), (2, 20), (3, 30)].iter().map(|(k, v)| (k.to_be_bytes().to_vec(), Some(*v))).collect();
        assert_eq!(read, expected);
        Ok(())
    }

    #[test]
    fn commits_on_completion_and_on_restore_once() -> Result<(), OperatorError> {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = FileSinkConfig { path: tmp.path().display().to_string(), format: FileFormat::Text };
        let mut sink = harness(1).open(FileSink::new(cfg.clone()))?;
        write(&mut sink, &[Record::new_i64(&5u64.to_be_bytes(), 3)])?;
        let chk1 = sink.snapshot(1)?;
        assert!(visible(tmp.path()).is_empty(), "nothing is visible before the checkpoint completes");
        // Data after the checkpoint: lost with the failure, never committed.
        write(&mut sink, &[Record::new_i64(&6u64.to_be_bytes(), 1)])?;
        drop(sink); // the task manager dies before the notification arrives

        // Another job writing to the same directory: its in-progress file is not ours to remove.
        std::fs::write(tmp.path().join(".part-other-0-1-0.inprogress"), "9,9\n").unwrap();
        let mut restored = harness(2).restore(&chk1).open(FileSink::new(cfg))?;
        assert_eq!(visible(tmp.path()), vec!["part-j-0-1-0".to_string()]);
        assert_eq!(std::fs::read_to_string(tmp.path().join("part-j-0-1-0")).unwrap(), "5,3\n");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 2, "our leftover in-progress files are removed");
        assert!(tmp.path().join(".part-other-0-1-0.inprogress").exists());
        // A late notification for the same checkpoint does nothing.
        restored.operator().pending.add(CheckpointId(1), "part-j-0-1-0".into());
        restored.notify_checkpoint_complete(1)?;
        assert_eq!(visible(tmp.path()).len(), 1);
        Ok(())
    }

    #[test]
    fn a_fallback_to_an_older_checkpoint_commits_no_line_twice() -> Result<(), OperatorError> {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = FileSinkConfig { path: tmp.path().display().to_string(), format: FileFormat::Text };
        let rec = |k: u64, v: i64| Record::new_i64(&k.to_be_bytes(), v);
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

        let mut sink = harness(1).open(FileSink::new(cfg.clone()))?;
        write(&mut sink, &[rec(1, 1)])?;
        let chk1 = sink.snapshot(1)?;
        sink.notify_checkpoint_complete(1)?;
        // Checkpoint 2 commits two more lines; then its _metadata turns out unreadable and the job restores
        // from checkpoint 1.
        write(&mut sink, &[rec(2, 1), rec(1, 2)])?;
        sink.snapshot(2)?;
        sink.notify_checkpoint_complete(2)?;
        drop(sink);
        assert_eq!(all_lines(tmp.path()), ["1,1", "1,2", "2,1"]);

        let mut sink = harness(2).restore(&chk1).open(FileSink::new(cfg.clone()))?;
        // The replay, in another order across channels, then new records.
        write(&mut sink, &[rec(1, 2)])?;
        let chk3 = sink.snapshot(3)?;
        sink.notify_checkpoint_complete(3)?;
        drop(sink);
        // Another failure during the replay: what is still to drop survives in the state.
        let mut sink = harness(3).restore(&chk3).open(FileSink::new(cfg))?;
        write(&mut sink, &[rec(2, 1), rec(3, 1)])?;
        sink.snapshot(4)?;
        sink.notify_checkpoint_complete(4)?;
        assert_eq!(all_lines(tmp.path()), ["1,1", "1,2", "2,1", "3,1"], "every line exactly once");
        Ok(())
    }

    /// Two sink subtasks fed round-robin: after a fallback, a line one subtask committed past the restore point
    /// may be replayed to the other, which must drop it too.
    #[test]
    fn a_fallback_drops_lines_another_subtask_committed() -> Result<(), OperatorError> {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = FileSinkConfig { path: tmp.path().display().to_string(), format: FileFormat::Text };
        let rec = |k: u64, v: i64| Record::new_i64(&k.to_be_bytes(), v);
        let mut sinks = Vec::new();
        let mut chk1 = Vec::new();
        for s in 0..2 {
            let mut sink = harness(1).subtask(s, 2).open(FileSink::new(cfg.clone()))?;
            chk1.push(sink.snapshot(1)?);
            sink.notify_checkpoint_complete(1)?;
            // Checkpoint 2 commits a line on each subtask, then turns out unreadable.
            write(&mut sink, &[rec(10 + s as u64, 1)])?;
            sink.snapshot(2)?;
            sink.notify_checkpoint_complete(2)?;
            sinks.push(sink);
        }
        drop(sinks);
        // Restored from checkpoint 1: union state gives each subtask both positions.
        let chk1 = Snapshot::combine(&chk1)?;
        let unions: u64 = chk1
            .subtasks()
            .iter()
            .flat_map(|s| s.operator_state.iter().flat_map(|h| h.states.iter()))
            .filter(|m| m.name == POSITIONS_STATE)
            .map(|m| m.elements)
            .sum();
        assert_eq!(unions, 2);
        for s in 0..2 {
            let mut sink = harness(2).subtask(s, 2).restore(&chk1).open(FileSink::new(cfg.clone()))?;
            // The replay crosses over: subtask 0 receives what subtask 1 committed, and the other way round.
            let crossed = rec(10 + (1 - s as u64), 1);
            write(&mut sink, &[crossed, rec(20 + s as u64, 1)])?;
            sink.snapshot(3)?;
            sink.notify_checkpoint_complete(3)?;
        }
        let mut lines: Vec<String> = visible(tmp.path())
            .iter()
            .flat_map(|f| {
                std::fs::read_to_string(tmp.path().join(f)).unwrap().lines().map(str::to_string).collect::<Vec<_>>()
            })
            .collect();
        lines.sort();
        assert_eq!(lines, ["10,1", "11,1", "20,1", "21,1"], "every line exactly once");
        Ok(())
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use crate::builtins::declare::config_map as m;

    #[test]
    fn file_sink_needs_path() {
        assert_eq!(FileSinkConfig::from_map(&m(&[])).unwrap_err().field, "path");
        let c = FileSinkConfig::from_map(&m(&[("path", "/o"), ("format", "json")])).unwrap();
        assert_eq!(c.format, FileFormat::Json);
        let e = FileSinkConfig::from_map(&m(&[("path", "/o"), ("format", "xml")])).unwrap_err();
        assert!(e.field == "format" && e.message.contains("text, csv, json or parquet"), "{e:?}");
    }
}
