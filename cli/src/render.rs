//! Output shapes, one function per shape and format, so text and JSON stay consistent across commands.
//!
//! JSON field names are a contract (DESIGN §10): a job has `id`, `name`, `state`, `last_completed_checkpoint`
//! (number or null), `restarts`, `failure_reason` (string or null; `failure` is the same) and more; a checkpoint has `id`, `status`, `trigger_time` (ms since the epoch),
//! `duration_ms`, `full_size_bytes`, `uploaded_bytes`, `failure_reason` (string or null) and more. Text the
//! job manager leaves empty is `null` in JSON; so are the end time of a job that has not ended and the path
//! of a checkpoint that has none.

use serde::Serialize;
use std::time::Duration;
use weir_common::job::kind::{DeclaredState, FieldInfo, KindInfo, Role};
use weir_common::job::schema::{Column, OutputSchema};
use weir_proto as pb;

// ------------------------------------------------------------------------------------------------ jobs

/// A job as printed by `--output json`.
#[allow(missing_docs)] // its fields are the keys of the JSON output (DESIGN §10)
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct JobJson {
    pub id: String,
    pub name: String,
    pub state: String,
    pub last_completed_checkpoint: Option<u64>,
    pub restarts: u32,
    pub attempt: u32,
    pub parallelism: u32,
    pub max_parallelism: u32,
    pub checkpoints_completed: u64,
    pub checkpoints_failed: u64,
    pub failure: Option<String>,
    /// The same as `failure`, under the name DESIGN §10 promises.
    pub failure_reason: Option<String>,
    /// The checkpoint the current attempt restored from (null: none), naming any fallback past unreadable ones.
    pub restored_from: Option<String>,
    /// What the job waits on that it cannot fix itself, e.g. a failing final checkpoint (null: nothing).
    pub waiting: Option<String>,
    /// Operators of the savepoint the job started from whose state was dropped (--allow-non-restored-state).
    pub dropped_state: Vec<String>,
    /// The same, state by state: `{"uid", "state", "reason"}`.
    pub dropped_states: Vec<DroppedStateJson>,
    pub submit_time_ms: u64,
    pub end_time_ms: Option<u64>,
    /// Event time: the lowest watermark over the job's tasks (ms; null: none yet).
    pub lowest_watermark: Option<i64>,
    /// Processing time minus the lowest watermark, when it was read (ms; null without a watermark or after
    /// the input ended).
    pub watermark_lag_ms: Option<i64>,
    /// Each task's watermark: `{"vertex", "subtask", "operators", "watermark"}`.
    pub watermarks: Vec<TaskWatermarkJson>,
}

/// One task's watermark, in a job's JSON.
#[allow(missing_docs)] // its fields are the keys of the JSON output
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct TaskWatermarkJson {
    pub vertex: u32,
    pub subtask: u32,
    pub operators: String,
    pub watermark: Option<i64>,
}

/// How far event time is behind `now_ms`: none without a watermark, or once the input has ended (the maximum).
fn watermark_lag(lowest: Option<i64>, now_ms: u64) -> Option<i64> {
    lowest.and_then(|w| weir_common::job::watermarks::lag_ms(now_ms as i64, w))
}

/// A watermark for people: the maximum is the end of input.
fn watermark_text(w: Option<i64>) -> String {
    match w {
        None => "none yet".into(),
        Some(i64::MAX) => "end of input".into(),
        Some(w) => w.to_string(),
    }
}

impl From<&pb::JobInfo> for JobJson {
    fn from(j: &pb::JobInfo) -> Self {
        JobJson {
            id: j.id.clone(),
            name: j.name.clone(),
            state: j.state().name().to_string(),
            last_completed_checkpoint: j.last_completed_checkpoint,
            restarts: j.restarts,
            attempt: j.attempt,
            parallelism: j.parallelism,
            max_parallelism: j.max_parallelism,
            checkpoints_completed: j.checkpoints_completed,
            checkpoints_failed: j.checkpoints_failed,
            failure: non_empty(&j.failure),
            failure_reason: non_empty(&j.failure),
            restored_from: non_empty(&j.restored_from),
            waiting: non_empty(&j.waiting),
            dropped_state: j.dropped_state.clone(),
            dropped_states: j
                .dropped_states
                .iter()
                .map(|d| DroppedStateJson { uid: d.uid.clone(), state: d.state.clone(), reason: d.reason.clone() })
                .collect(),
            submit_time_ms: j.submit_time_ms,
            end_time_ms: non_zero(j.end_time_ms),
            lowest_watermark: j.lowest_watermark,
            watermark_lag_ms: None,
            watermarks: j
                .watermarks
                .iter()
                .map(|t| TaskWatermarkJson {
                    vertex: t.vertex,
                    subtask: t.subtask,
                    operators: t.operators.clone(),
                    watermark: t.watermark,
                })
                .collect(),
        }
    }
}

/// One state a restore dropped, in a job's JSON.
#[allow(missing_docs)] // its fields are the keys of the JSON output (DESIGN §10)
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct DroppedStateJson {
    pub uid: String,
    pub state: String,
    pub reason: String,
}

/// A job for `--output json`, its watermark lag measured at `now_ms`.
pub fn job_json(job: &pb::JobInfo, now_ms: u64) -> JobJson {
    JobJson { watermark_lag_ms: watermark_lag(job.lowest_watermark, now_ms), ..JobJson::from(job) }
}

/// Jobs for `--output json` (an array).
pub fn jobs_json(jobs: &[pb::JobInfo], now_ms: u64) -> Vec<JobJson> {
    jobs.iter().map(|j| job_json(j, now_ms)).collect()
}

/// One job for people (`weir job status`), a `key: value` line per field; `now_ms` ages running jobs.
pub fn job_text(job: &pb::JobInfo, now_ms: u64) -> String {
    let mut rows: Vec<(&str, String)> = vec![
        ("id", job.id.clone()),
        ("name", job.name.clone()),
        ("state", job.state().name().to_string()),
        ("parallelism", format!("{} (max parallelism {})", job.parallelism, job.max_parallelism)),
        ("attempt", format!("{} ({} restarts)", job.attempt, job.restarts)),
        (
            "checkpoints",
            format!(
                "{} completed, {} failed, last completed: {}",
                job.checkpoints_completed,
                job.checkpoints_failed,
                opt_u64(job.last_completed_checkpoint)
            ),
        ),
        ("submitted", utc_time(job.submit_time_ms)),
    ];
    if job.end_time_ms > 0 {
        rows.push(("ended", utc_time(job.end_time_ms)));
    }
    if job.submit_time_ms > 0 {
        let end = if job.end_time_ms > 0 { job.end_time_ms } else { now_ms };
        rows.push(("duration", duration_ms(end.saturating_sub(job.submit_time_ms))));
    }
    if !job.restored_from.is_empty() {
        rows.push(("restored from", job.restored_from.clone()));
    }
    if !job.waiting.is_empty() {
        rows.push(("waiting", job.waiting.clone()));
    }
    if !job.dropped_state.is_empty() {
        rows.push(("dropped state", format!("of operators {}", job.dropped_state.join(", "))));
    }
    for d in &job.dropped_states {
        rows.push(("  dropped", format!("{}/{}: {}", d.uid, d.state, d.reason)));
    }
    if !job.failure.is_empty() {
        rows.push(("failure", job.failure.clone()));
    }
    if !job.watermarks.is_empty() {
        let lag = match watermark_lag(job.lowest_watermark, now_ms) {
            Some(lag) => format!(" (lag {})", duration_ms(lag.max(0) as u64)),
            None => String::new(),
        };
        rows.push(("watermark", format!("{}{lag}", watermark_text(job.lowest_watermark))));
        for t in &job.watermarks {
            rows.push(("  task", format!("{} #{}: {}", t.operators, t.subtask, watermark_text(t.watermark))));
        }
    }
    key_values(&rows)
}

/// Jobs as a table (`weir job list`).
pub fn jobs_table(jobs: &[pb::JobInfo]) -> String {
    if jobs.is_empty() {
        return "no jobs\n".to_string();
    }
    let rows = jobs
        .iter()
        .map(|j| {
            vec![
                j.id.clone(),
                j.name.clone(),
                j.state().name().to_string(),
                j.parallelism.to_string(),
                opt_u64(j.last_completed_checkpoint),
                j.restarts.to_string(),
                utc_time(j.submit_time_ms),
            ]
        })
        .collect::<Vec<_>>();
    table(&["ID", "NAME", "STATE", "PARALLELISM", "LAST CHECKPOINT", "RESTARTS", "SUBMITTED"], &rows)
}

/// One short line about a job (`weir job cancel`, the end of `--wait`).
pub fn job_line(job: &pb::JobInfo) -> String {
    let mut line = format!("job {} ({}): {}", job.id, job.name, job.state());
    if !job.failure.is_empty() {
        line.push_str(": ");
        line.push_str(&job.failure);
    }
    line
}

// ----------------------------------------------------------------------------------------- checkpoints

/// A checkpoint as printed by `--output json`.
#[allow(missing_docs)] // its fields are the keys of the JSON output (DESIGN §10)
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct CheckpointJson {
    pub id: u64,
    pub status: String,
    /// Milliseconds since the Unix epoch.
    pub trigger_time: u64,
    pub duration_ms: u64,
    pub full_size_bytes: u64,
    pub uploaded_bytes: u64,
    pub failure_reason: Option<String>,
    pub path: Option<String>,
    pub is_final: bool,
    pub is_savepoint: bool,
}

impl From<&pb::CheckpointInfo> for CheckpointJson {
    fn from(c: &pb::CheckpointInfo) -> Self {
        CheckpointJson {
            id: c.id,
            status: c.status().name().to_string(),
            trigger_time: c.trigger_time_ms,
            duration_ms: c.duration_ms,
            full_size_bytes: c.full_size_bytes,
            uploaded_bytes: c.uploaded_bytes,
            failure_reason: non_empty(&c.failure_reason),
            path: non_empty(&c.path),
            is_final: c.is_final,
            is_savepoint: c.is_savepoint,
        }
    }
}

/// A checkpoint for `--output json`.
pub fn checkpoint_json(c: &pb::CheckpointInfo) -> CheckpointJson {
    CheckpointJson::from(c)
}

/// Checkpoints for `--output json` (an array).
pub fn checkpoints_json(cs: &[pb::CheckpointInfo]) -> Vec<CheckpointJson> {
    cs.iter().map(checkpoint_json).collect()
}

/// Checkpoints as a table (`weir checkpoints`).
pub fn checkpoints_table(cs: &[pb::CheckpointInfo]) -> String {
    if cs.is_empty() {
        return "no checkpoints\n".to_string();
    }
    let rows = cs
        .iter()
        .map(|c| {
            let mut note = match (c.is_final, c.is_savepoint) {
                (true, true) => "final, savepoint".to_string(),
                (true, false) => "final".to_string(),
                (false, true) => "savepoint".to_string(),
                (false, false) => String::new(),
            };
            if !c.failure_reason.is_empty() {
                if !note.is_empty() {
                    note.push_str("; ");
                }
                note.push_str(&c.failure_reason);
            }
            vec![
                c.id.to_string(),
                c.status().name().to_string(),
                utc_time(c.trigger_time_ms),
                duration_ms(c.duration_ms),
                size(c.full_size_bytes),
                size(c.uploaded_bytes),
                note,
            ]
        })
        .collect::<Vec<_>>();
    table(&["ID", "STATUS", "TRIGGERED", "DURATION", "FULL SIZE", "UPLOADED", "NOTE"], &rows)
}

// --------------------------------------------------------------------------------------------- cluster

/// One task manager as printed by `weir cluster --output json`.
#[allow(missing_docs)] // its fields are the keys of the JSON output (DESIGN §10)
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct TaskManagerJson {
    pub id: String,
    pub rpc_address: String,
    pub data_address: String,
    pub slots: u32,
    pub free_slots: u32,
}

/// The cluster as printed by `weir cluster --output json`.
#[allow(missing_docs)] // its fields are the keys of the JSON output (DESIGN §10)
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct ClusterJson {
    pub task_managers: Vec<TaskManagerJson>,
    pub total_slots: u32,
    pub free_slots: u32,
    /// HA: the leader's client address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// HA: the leader's epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
}

/// The cluster for `--output json`.
pub fn cluster_json(c: &pb::ClusterOverviewResponse) -> ClusterJson {
    ClusterJson {
        task_managers: c
            .task_managers
            .iter()
            .map(|t| TaskManagerJson {
                id: t.id.clone(),
                rpc_address: t.rpc_address.clone(),
                data_address: t.data_address.clone(),
                slots: t.slots,
                free_slots: t.free_slots,
            })
            .collect(),
        total_slots: c.total_slots,
        free_slots: c.free_slots,
        leader: (!c.leader.is_empty()).then(|| c.leader.clone()),
        epoch: (c.epoch > 0).then_some(c.epoch),
    }
}

/// The cluster for people: a summary line and a table of task managers.
pub fn cluster_text(c: &pb::ClusterOverviewResponse) -> String {
    let mut out = format!(
        "{} task manager{}, {} slots ({} free)\n",
        c.task_managers.len(),
        if c.task_managers.len() == 1 { "" } else { "s" },
        c.total_slots,
        c.free_slots
    );
    if !c.leader.is_empty() {
        out.push_str(&format!("leader {} (epoch {})\n", c.leader, c.epoch));
    }
    if !c.task_managers.is_empty() {
        let rows = c
            .task_managers
            .iter()
            .map(|t| {
                vec![
                    t.id.clone(),
                    t.rpc_address.clone(),
                    t.data_address.clone(),
                    t.slots.to_string(),
                    t.free_slots.to_string(),
                ]
            })
            .collect::<Vec<_>>();
        out.push_str(&table(&["ID", "RPC ADDRESS", "DATA ADDRESS", "SLOTS", "FREE"], &rows));
    }
    out
}

/// An operator kind for `--output json`.
#[derive(Serialize, Debug)]
pub struct KindJson {
    /// The kind's name, as a spec's `kind:` gives it.
    pub kind: String,
    /// source, operator, two-input or sink.
    pub role: &'static str,
    /// Whether its input is partitioned by key and its state kept per key.
    pub keyed: bool,
    /// The task manager's version of it.
    pub version: String,
    /// What it is for.
    pub doc: String,
    /// The config fields it reads.
    pub config: Vec<FieldInfo>,
    /// Its declared states.
    pub states: Vec<DeclaredState>,
    /// Columns it needs from its input (empty: any).
    pub input_columns: Vec<Column>,
    /// undeclared, columns, same-as-input or from-config.
    pub output: &'static str,
    /// Its output columns, when they are fixed.
    pub output_columns: Vec<Column>,
    /// It works on event time: its job's source must emit timestamps.
    pub needs_event_time: bool,
}

/// Operator kinds for `--output json`.
pub fn kinds_json(kinds: &[KindInfo]) -> Vec<KindJson> {
    kinds
        .iter()
        .map(|k| KindJson {
            kind: k.kind.clone(),
            role: k.role.as_str(),
            keyed: k.keyed,
            version: k.version.clone(),
            doc: k.doc.clone(),
            config: k.fields.clone(),
            states: k.states.clone(),
            input_columns: k.input_columns.clone(),
            output: k.output.mode(),
            output_columns: match &k.output {
                OutputSchema::Columns(c) => c.clone(),
                _ => Vec::new(),
            },
            needs_event_time: k.needs_event_time,
        })
        .collect()
}

fn columns_text(cs: &[Column]) -> String {
    cs.iter()
        .map(|c| format!("{} {}{}", c.name, c.data_type, if c.nullable { "" } else { " not null" }))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Operator kinds for people: each kind's line, then its config fields, states and columns.
pub fn kinds_text(kinds: &[KindInfo]) -> String {
    let mut out = String::new();
    for (i, k) in kinds.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let keyed = if k.keyed { ", keyed" } else { "" };
        let time = if k.needs_event_time { ", event time" } else { "" };
        out.push_str(&format!("{} ({}{keyed}{time}, version {})\n", k.kind, k.role.as_str(), k.version));
        if !k.doc.is_empty() {
            out.push_str(&format!("  {}\n", k.doc));
        }
        if k.fields.is_empty() {
            out.push_str("  config: none\n");
        } else {
            // A field whose value the stored state depends on is marked: changing it is named on restore.
            let marked = k.fields.iter().any(|f| f.shapes_state);
            out.push_str(if marked { "  config (* shapes its state):\n" } else { "  config:\n" });
            let width = k.fields.iter().map(|f| f.name.chars().count()).max().unwrap_or(0);
            for f in &k.fields {
                let mark = if f.shapes_state { "*" } else { " " };
                out.push_str(&format!("   {mark}{:width$}  {}\n", f.name, f.doc));
            }
        }
        for s in &k.states {
            out.push_str(&format!("  state {}: {} of {}\n", s.name, s.kind.as_str(), s.type_name));
        }
        if !k.input_columns.is_empty() {
            out.push_str(&format!("  needs: {}\n", columns_text(&k.input_columns)));
        }
        let output = match &k.output {
            OutputSchema::Columns(c) => columns_text(c),
            OutputSchema::SameAsInput => "its input's columns".into(),
            OutputSchema::FromConfig => "columns worked out from its config and input".into(),
            OutputSchema::Undeclared if k.role == Role::Sink => String::new(),
            OutputSchema::Undeclared => "undeclared".into(),
        };
        if !output.is_empty() {
            out.push_str(&format!("  emits: {output}\n"));
        }
    }
    out
}

// ------------------------------------------------------------------------------------------ formatting

/// Pretty JSON (fields in declaration order) followed by a newline.
pub fn json_text<T: Serialize>(v: &T) -> String {
    let mut s = serde_json::to_string_pretty(v).expect("plain structs always serialize");
    s.push('\n');
    s
}

/// A left-aligned table with a header row; columns separated by two spaces, no trailing blanks.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            let pad = widths.get(i).copied().unwrap_or(0).saturating_sub(cell.chars().count());
            line.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn key_values(rows: &[(&str, String)]) -> String {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    let mut out = String::new();
    for (k, v) in rows {
        out.push_str(&format!("{:<width$} {v}\n", format!("{k}:")));
    }
    out
}

/// A duration in milliseconds for people: `850 ms`, `1.25 s`, `12.3 s`, `2m 03s`, `1h 02m`, `3d 04h`.
pub fn duration_ms(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 10_000 {
        format!("{:.2} s", ms as f64 / 1000.0)
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        let s = ms / 1000;
        if s < 3600 {
            format!("{}m {:02}s", s / 60, s % 60)
        } else if s < 86_400 {
            format!("{}h {:02}m", s / 3600, (s % 3600) / 60)
        } else {
            format!("{}d {:02}h", s / 86_400, (s % 86_400) / 3600)
        }
    }
}

/// A [`Duration`] for people (see [`duration_ms`]).
pub fn duration(d: Duration) -> String {
    duration_ms(d.as_millis().min(u64::MAX as u128) as u64)
}

/// A byte count for people, in binary units: `512 B`, `1.5 KiB`, `12.0 MiB`, `3.2 GiB`.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Milliseconds since the epoch as UTC time, `2024-05-01 12:00:03 UTC`; `-` for 0 (unknown).
pub fn utc_time(ms: u64) -> String {
    if ms == 0 {
        return "-".to_string();
    }
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", rem / 3600, (rem % 3600) / 60, rem % 60)
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn opt_u64(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn non_zero(v: u64) -> Option<u64> {
    (v != 0).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn to_value<T: Serialize>(v: &T) -> Value {
        serde_json::to_value(v).unwrap()
    }

    fn running_job() -> pb::JobInfo {
        pb::JobInfo {
            id: "j-1".into(),
            name: "demo".into(),
            state: pb::JobState::Running as i32,
            last_completed_checkpoint: None,
            restarts: 0,
            attempt: 1,
            submit_time_ms: 1_700_000_000_000,
            end_time_ms: 0,
            failure: String::new(),
            parallelism: 2,
            max_parallelism: 128,
            checkpoints_completed: 0,
            checkpoints_failed: 0,
            restored_from: String::new(),
            waiting: String::new(),
            dropped_state: vec![],
            dropped_states: vec![],
            watermarks: vec![],
            lowest_watermark: None,
        }
    }

    #[test]
    fn job_json_fields_and_nulls() {
        let v = to_value(&job_json(&running_job(), 0));
        assert_eq!(
            v,
            json!({
                "id": "j-1", "name": "demo", "state": "RUNNING", "last_completed_checkpoint": null,
                "restarts": 0, "attempt": 1, "parallelism": 2, "max_parallelism": 128,
                "checkpoints_completed": 0, "checkpoints_failed": 0, "failure": null,
                "failure_reason": null, "restored_from": null, "waiting": null, "dropped_state": [], "dropped_states": [],
                "submit_time_ms": 1_700_000_000_000u64, "end_time_ms": null,
                "lowest_watermark": null, "watermark_lag_ms": null, "watermarks": []
            })
        );
        let with_time = pb::JobInfo {
            watermarks: vec![
                pb::TaskWatermark { vertex: 0, subtask: 0, operators: "src".into(), watermark: Some(9_000) },
                pb::TaskWatermark { vertex: 1, subtask: 0, operators: "sink".into(), watermark: None },
            ],
            lowest_watermark: Some(9_000),
            ..running_job()
        };
        let v = to_value(&job_json(&with_time, 10_500));
        assert_eq!(v["lowest_watermark"], json!(9_000));
        assert_eq!(v["watermark_lag_ms"], json!(1_500));
        assert_eq!(v["watermarks"][1], json!({"vertex": 1, "subtask": 0, "operators": "sink", "watermark": null}));
        let text = job_text(&with_time, 10_500);
        assert!(
            text.contains("watermark") && text.contains("9000 (lag 1.50 s)") && text.contains("sink #0: none yet"),
            "{text}"
        );
        let ended = pb::JobInfo { lowest_watermark: Some(i64::MAX), ..with_time };
        assert_eq!(to_value(&job_json(&ended, 10_500))["watermark_lag_ms"], json!(null));
        let failed = pb::JobInfo {
            state: pb::JobState::Failed as i32,
            last_completed_checkpoint: Some(7),
            restarts: 3,
            attempt: 4,
            end_time_ms: 1_700_000_060_000,
            failure: "operator \"counts\": boom".into(),
            checkpoints_completed: 7,
            checkpoints_failed: 1,
            ..running_job()
        };
        let v = to_value(&job_json(&failed, 0));
        assert_eq!(v["last_completed_checkpoint"], json!(7));
        assert_eq!(v["failure"], json!("operator \"counts\": boom"));
        assert_eq!(v["failure_reason"], json!("operator \"counts\": boom"));
        assert_eq!(v["end_time_ms"], json!(1_700_000_060_000u64));
        assert_eq!(v["restarts"], json!(3));
        assert_eq!(to_value(&jobs_json(&[running_job(), failed], 0)).as_array().unwrap().len(), 2);
        assert_eq!(to_value(&jobs_json(&[], 0)), json!([]));
    }

    #[test]
    fn checkpoint_json_fields_and_nulls() {
        let done = pb::CheckpointInfo {
            id: 3,
            status: pb::CheckpointStatus::Completed as i32,
            trigger_time_ms: 1_700_000_000_123,
            duration_ms: 420,
            full_size_bytes: 10_000,
            uploaded_bytes: 2_000,
            failure_reason: String::new(),
            path: "file:///tmp/cp/j-1/chk-3".into(),
            is_final: true,
            is_savepoint: false,
        };
        assert_eq!(
            to_value(&checkpoint_json(&done)),
            json!({
                "id": 3, "status": "COMPLETED", "trigger_time": 1_700_000_000_123u64, "duration_ms": 420,
                "full_size_bytes": 10_000, "uploaded_bytes": 2_000, "failure_reason": null,
                "path": "file:///tmp/cp/j-1/chk-3", "is_final": true, "is_savepoint": false
            })
        );
        let failed = pb::CheckpointInfo {
            status: pb::CheckpointStatus::Failed as i32,
            failure_reason: "expired after 600000 ms".into(),
            path: String::new(),
            is_final: false,
            ..done
        };
        let v = to_value(&checkpoint_json(&failed));
        assert_eq!(v["failure_reason"], json!("expired after 600000 ms"));
        assert_eq!(v["path"], Value::Null);
        assert_eq!(to_value(&checkpoints_json(&[failed])).as_array().unwrap().len(), 1);
    }

    #[test]
    fn text_outputs() {
        let t = jobs_table(&[running_job()]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("ID   NAME  STATE"), "{t}");
        assert!(
            lines[1].contains("j-1") && lines[1].contains("RUNNING") && lines[1].contains("2023-11-14 22:13:20 UTC")
        );
        assert_eq!(jobs_table(&[]), "no jobs\n");

        let s = job_text(&running_job(), 1_700_000_090_000);
        assert!(s.contains("state:       RUNNING\n"), "{s}");
        assert!(s.contains("last completed: -"), "{s}");
        assert!(s.contains("duration:    1m 30s"), "{s}");
        assert!(!s.contains("failure"));

        let c = pb::CheckpointInfo {
            id: 12,
            status: pb::CheckpointStatus::Failed as i32,
            trigger_time_ms: 1_700_000_000_000,
            duration_ms: 1500,
            full_size_bytes: 3 * 1024 * 1024,
            uploaded_bytes: 100,
            failure_reason: "declined".into(),
            path: String::new(),
            is_final: false,
            is_savepoint: false,
        };
        let t = checkpoints_table(&[c]);
        assert!(t.contains("1.50 s") && t.contains("3.0 MiB") && t.contains("100 B") && t.contains("declined"), "{t}");
        assert_eq!(checkpoints_table(&[]), "no checkpoints\n");

        let cluster = pb::ClusterOverviewResponse {
            task_managers: vec![pb::TaskManagerInfo {
                id: "tm-a".into(),
                rpc_address: "http://127.0.0.1:5000".into(),
                data_address: "127.0.0.1:5001".into(),
                slots: 2,
                free_slots: 1,
            }],
            total_slots: 2,
            free_slots: 1,
            ..Default::default()
        };
        assert!(cluster_text(&cluster).starts_with("1 task manager, 2 slots (1 free)\n"));
        assert_eq!(to_value(&cluster_json(&cluster))["task_managers"][0]["free_slots"], json!(1));
    }

    #[test]
    fn json_text_keeps_field_order() {
        let text = json_text(&job_json(&running_job(), 0));
        assert!(text.starts_with("{\n  \"id\": \"j-1\",\n  \"name\": \"demo\",\n  \"state\": \"RUNNING\""), "{text}");
        assert!(text.ends_with("}\n"));
    }

    #[test]
    fn table_alignment() {
        let t = table(&["A", "LONG"], &[vec!["xyz".into(), "1".into()], vec!["q".into(), String::new()]]);
        assert_eq!(t, "A    LONG\nxyz  1\nq\n");
    }

    #[test]
    fn durations() {
        assert_eq!(duration_ms(0), "0 ms");
        assert_eq!(duration_ms(999), "999 ms");
        assert_eq!(duration_ms(1_250), "1.25 s");
        assert_eq!(duration_ms(12_340), "12.3 s");
        assert_eq!(duration_ms(123_000), "2m 03s");
        assert_eq!(duration_ms(3_720_000), "1h 02m");
        assert_eq!(duration_ms(273_600_000), "3d 04h");
        assert_eq!(duration(Duration::from_secs(10)), "10.0 s");
    }

    #[test]
    fn sizes() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(12 * 1024 * 1024), "12.0 MiB");
        assert_eq!(size(5 * 1024 * 1024 * 1024 * 1024), "5.0 TiB");
        assert_eq!(size(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn times() {
        assert_eq!(utc_time(0), "-");
        assert_eq!(utc_time(1), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_time(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc_time(1_700_000_000_999), "2023-11-14 22:13:20 UTC");
    }
}

// ------------------------------------------------------------------------------------------ savepoints

/// `savepoint check` in JSON (DESIGN §10): `{"ok", "operators": [{"uid", "verdict", "reason", "states":
/// [{"name", "verdict", "reason", "from"?, "to"?}]}]}` (`from`/`to`: the schemas of a migrated or incompatible
/// state).
pub fn check_json(r: &pb::CheckSavepointResponse) -> serde_json::Value {
    let operators: Vec<serde_json::Value> = r
        .operators
        .iter()
        .map(|o| {
            let states: Vec<serde_json::Value> = o
                .states
                .iter()
                .map(|s| {
                    let mut j =
                        serde_json::json!({ "name": s.name, "verdict": s.verdict().name(), "reason": s.reason });
                    if !s.from.is_empty() {
                        j["from"] = s.from.clone().into();
                        j["to"] = s.to.clone().into();
                    }
                    j
                })
                .collect();
            serde_json::json!({ "uid": o.uid, "verdict": o.verdict().name(), "reason": o.reason, "states": states })
        })
        .collect();
    serde_json::json!({ "ok": r.ok, "operators": operators })
}

/// `savepoint check` as text: a line per operator, its states indented, then the outcome.
pub fn check_text(r: &pb::CheckSavepointResponse) -> String {
    let mut out = String::new();
    for o in &r.operators {
        out.push_str(&format!("{:<13} {}", o.verdict().name(), o.uid));
        if !o.reason.is_empty() {
            out.push_str(&format!(": {}", o.reason));
        }
        out.push('\n');
        for s in &o.states {
            out.push_str(&format!("  {:<11} {}", s.verdict().name(), s.name));
            if !s.reason.is_empty() {
                out.push_str(&format!(": {}", s.reason));
            }
            out.push('\n');
            if !s.from.is_empty() {
                out.push_str(&format!("              was: {}\n              now: {}\n", s.from, s.to));
            }
        }
    }
    out.push_str(if r.ok {
        "ok: a submission with these arguments would be accepted\n"
    } else {
        "refused: a submission with these arguments would be refused\n"
    });
    out
}

/// `savepoint trigger` and `job stop --savepoint` in JSON: `{"savepoint": URL, ...}`.
pub fn savepoint_json(r: &pb::SavepointResponse) -> serde_json::Value {
    serde_json::json!({
        "savepoint": r.savepoint,
        "checkpoint_id": r.checkpoint_id,
        "full_size_bytes": r.full_size_bytes,
        "format": r.format().name(),
        "job": r.job.as_ref().map(JobJson::from),
    })
}

/// A state in `savepoint inspect --output json`.
#[allow(missing_docs)] // its fields are the keys of the JSON output (DESIGN §10)
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct StateJson {
    pub name: String,
    pub kind: String,
    pub bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elements: Option<u64>,
    pub ttl: Option<String>,
}

/// One subtask's snapshot in `savepoint inspect --output json`.
#[allow(missing_docs)] // its fields are the keys of the JSON output (DESIGN §10)
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct SubtaskJson {
    pub subtask: u32,
    pub key_groups: Option<[u32; 2]>,
    pub keyed_bytes: u64,
    pub backend: Option<String>,
    pub operator_state_elements: u64,
    pub operator_state_bytes: u64,
}

/// An operator in `savepoint inspect --output json`.
#[allow(missing_docs)] // its fields are the keys of the JSON output (DESIGN §10)
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct OperatorJson {
    pub uid: String,
    pub kind: String,
    pub parallelism: u32,
    pub max_parallelism: u32,
    pub states: Vec<StateJson>,
    pub subtasks: Vec<SubtaskJson>,
}

/// `savepoint inspect --output json`: `{"operators": [{"uid", "kind", "parallelism", "max_parallelism",
/// "states": [{"name", "kind", "bytes", "elements"?}]}]}` and more.
pub fn inspect_json(r: &pb::InspectSavepointResponse) -> serde_json::Value {
    let operators: Vec<OperatorJson> = r
        .operators
        .iter()
        .map(|o| OperatorJson {
            uid: o.uid.clone(),
            kind: o.kind.clone(),
            parallelism: o.parallelism,
            max_parallelism: o.max_parallelism,
            states: o
                .states
                .iter()
                .map(|s| StateJson {
                    name: s.name.clone(),
                    kind: s.kind.clone(),
                    bytes: s.bytes,
                    elements: s.elements,
                    ttl: non_empty(&s.ttl),
                })
                .collect(),
            subtasks: o
                .subtasks
                .iter()
                .map(|s| SubtaskJson {
                    subtask: s.subtask,
                    key_groups: s.key_group_start.zip(s.key_group_end).map(|(a, b)| [a, b]),
                    keyed_bytes: s.keyed_bytes,
                    backend: (s.backend != 0).then(|| s.backend().name()),
                    operator_state_elements: s.operator_state_elements,
                    operator_state_bytes: s.operator_state_bytes,
                })
                .collect(),
        })
        .collect();
    serde_json::json!({
        "url": r.url,
        "job_id": r.job_id,
        "checkpoint_id": r.checkpoint_id,
        "format": r.format().name(),
        "max_parallelism": r.max_parallelism,
        "timestamp_ms": r.timestamp_ms,
        "operators": operators,
    })
}

/// `savepoint inspect` for people.
pub fn savepoint_text(r: &pb::InspectSavepointResponse) -> String {
    let mut out = format!(
        "{} ({}, checkpoint {} of job {}, max parallelism {}, taken {})\n",
        r.url,
        r.format(),
        r.checkpoint_id,
        r.job_id,
        r.max_parallelism,
        utc_time(r.timestamp_ms)
    );
    for o in &r.operators {
        out.push_str(&format!("operator {} ({}), parallelism {}\n", o.uid, o.kind, o.parallelism));
        for s in &o.states {
            let unit = if s.kind == "timers" { "timers" } else { "elements" };
            let elements = s.elements.map(|e| format!(", {e} {unit}")).unwrap_or_default();
            out.push_str(&format!("  state {} ({}): {}{elements}\n", s.name, s.kind, size(s.bytes)));
        }
        for s in &o.subtasks {
            let kg = match (s.key_group_start, s.key_group_end) {
                (Some(a), Some(b)) => format!("key groups {a}-{b}, {} keyed", size(s.keyed_bytes)),
                _ => "no keyed state".to_string(),
            };
            out.push_str(&format!(
                "  subtask {}: {kg}, {} operator-state elements\n",
                s.subtask, s.operator_state_elements
            ));
        }
    }
    out
}

/// `weir sql explain`: the operators a script plans into, one block each in the order data flows: uid, kind,
/// input and parallelism, then the config.
pub fn explain_text(spec: &weir_common::job::spec::JobSpecFile) -> String {
    let mut out = format!("job {}", spec.name);
    match spec.parallelism {
        Some(p) => out.push_str(&format!(", parallelism {p}\n")),
        None => out.push_str(", parallelism: the job manager's default\n"),
    }
    for op in &spec.operators {
        let from = match (&op.input, &op.inputs) {
            (Some(i), _) => format!(" <- {i}"),
            (None, Some(is)) => format!(" <- {}", is.join(", ")),
            _ => String::new(),
        };
        let p = op.parallelism.map(|p| format!(" (parallelism {p})")).unwrap_or_default();
        out.push_str(&format!("{} [{}]{from}{p}\n", op.uid, op.kind));
        if let Some(w) = op.watermarks.as_ref().and_then(|w| w.max_out_of_orderness_ms) {
            out.push_str(&format!("    watermarks: bounded out-of-orderness {w} ms\n"));
        }
        for (k, v) in &op.config {
            let v = match v {
                serde_yaml::Value::String(s) => s.clone(),
                // On one line, as a spec file writes a window: `{ sliding_ms: 10000, slide_ms: 2000 }`.
                serde_yaml::Value::Mapping(m) => {
                    let parts: Vec<String> = m
                        .iter()
                        .map(|(k, v)| {
                            let text =
                                |x: &serde_yaml::Value| serde_yaml::to_string(x).unwrap_or_default().trim().to_string();
                            format!("{}: {}", text(k), text(v))
                        })
                        .collect();
                    format!("{{ {} }}", parts.join(", "))
                }
                other => serde_yaml::to_string(other).unwrap_or_default().trim().to_string(),
            };
            out.push_str(&format!("    {k}: {v}\n"));
        }
    }
    out
}
