//! The job spec: the YAML/JSON file users write, its protobuf form, and validation into a [`ResolvedJob`]
//! with every default applied. Validation names the operator and field of every problem.

use crate::job::kind::Role;
pub use crate::job::kind::{KindCatalog, OperatorConfig, SideOutputs};
use crate::job::schema::Column;
use crate::job::watermarks::{WatermarkStrategy, WatermarksFile};
use crate::state::keygroup::{default_max_parallelism, UPPER_BOUND_MAX_PARALLELISM};
pub use crate::text::echo;
use crate::text::shortened;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use weir_proto as pb;

/// A problem with a job spec, naming where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The file is not valid YAML/JSON or does not have the spec's shape.
    #[error("malformed job spec: {0}")]
    Malformed(String),
    /// A field of the job itself is invalid.
    #[error("job field {field:?}: {message}")]
    Job {
        /// Field name.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A field of one operator is invalid.
    #[error("operator {uid:?}: field {field:?}: {message}")]
    Operator {
        /// The operator's uid (or its position if the uid is empty).
        uid: String,
        /// Field name.
        field: String,
        /// What is wrong.
        message: String,
    },
}

fn job_err(field: &str, message: impl Into<String>) -> SpecError {
    SpecError::Job { field: field.into(), message: message.into() }
}

fn op_err(uid: &str, field: &str, message: impl Into<String>) -> SpecError {
    SpecError::Operator { uid: uid.into(), field: field.into(), message: message.into() }
}

// ------------------------------------------------------------------------------------------- file form

/// The job spec as written in YAML or JSON.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpecFile {
    /// Job name.
    pub name: String,
    /// Default parallelism of every operator.
    #[serde(default)]
    pub parallelism: Option<u32>,
    /// Number of key groups; fixed for the job's lifetime.
    #[serde(default)]
    pub max_parallelism: Option<u32>,
    /// `rocksdb` (default) or `heap`.
    #[serde(default)]
    pub state_backend: Option<String>,
    /// Checkpoint settings.
    #[serde(default)]
    pub checkpointing: Option<CheckpointingFile>,
    /// Restart strategy.
    #[serde(default)]
    pub restart: Option<RestartFile>,
    /// Longest a partly filled batch waits before it is sent, ms.
    #[serde(default)]
    pub linger_ms: Option<i64>,
    /// The operators, sources first is customary but not required.
    pub operators: Vec<OperatorFile>,
}

/// Checkpoint settings as written in a spec file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointingFile {
    #[allow(missing_docs)]
    pub interval_ms: Option<i64>,
    #[allow(missing_docs)]
    pub timeout_ms: Option<i64>,
    #[allow(missing_docs)]
    pub min_pause_ms: Option<i64>,
    #[allow(missing_docs)]
    pub max_concurrent: Option<u32>,
    #[allow(missing_docs)]
    pub retained: Option<u32>,
    #[allow(missing_docs)]
    pub incremental: Option<bool>,
    #[allow(missing_docs)]
    pub tolerable_failures: Option<u32>,
}

/// A duration in milliseconds as written (signed, so that a negative one gets a message naming its field).
fn duration_ms(field: &str, value: Option<i64>) -> Result<Option<u64>, SpecError> {
    value
        .map(|v| {
            u64::try_from(v)
                .map_err(|_| job_err(field, format!("{v} is negative: durations are milliseconds, 0 or more")))
        })
        .transpose()
}

/// Restart strategy as written in a spec file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RestartFile {
    #[allow(missing_docs)]
    pub strategy: Option<String>,
    #[allow(missing_docs)]
    pub attempts: Option<u32>,
    #[allow(missing_docs)]
    pub delay_ms: Option<i64>,
    #[allow(missing_docs)]
    pub max_delay_ms: Option<i64>,
    #[allow(missing_docs)]
    pub multiplier: Option<f64>,
    #[allow(missing_docs)]
    pub reset_backoff_threshold_ms: Option<i64>,
    #[allow(missing_docs)]
    pub jitter_factor: Option<f64>,
    #[allow(missing_docs)]
    pub max_failures_per_interval: Option<u32>,
    #[allow(missing_docs)]
    pub failure_rate_interval_ms: Option<i64>,
}

/// One operator as written in a spec file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorFile {
    #[allow(missing_docs)]
    pub uid: String,
    #[allow(missing_docs)]
    pub kind: String,
    #[serde(default)]
    #[allow(missing_docs)]
    pub config: BTreeMap<String, serde_yaml::Value>,
    #[serde(default)]
    #[allow(missing_docs)]
    pub input: Option<String>,
    /// A two-input kind's inputs, first and second (instead of `input`).
    #[serde(default)]
    pub inputs: Option<Vec<String>>,
    #[serde(default)]
    #[allow(missing_docs)]
    pub parallelism: Option<u32>,
    #[serde(default)]
    #[allow(missing_docs)]
    pub partitioning: Option<String>,
    #[serde(default)]
    #[allow(missing_docs)]
    pub drop_state_on_change: bool,
    #[serde(default)]
    #[allow(missing_docs)]
    pub uid_stated: bool,
    #[serde(default)]
    #[allow(missing_docs)]
    pub watermarks: Option<WatermarksFile>,
    /// The columns the operator emits, for kinds that do not declare them (a source's schema).
    #[serde(default)]
    pub schema: Option<Vec<crate::job::schema::Column>>,
}

/// Deepest nesting of `[ ]` and `{ }` a spec file may have. The YAML parser's time grows with the square of it
/// (a 200 KB spec of nothing but brackets took 40 s to refuse), so it is counted first, in one pass.
pub const MAX_SPEC_NESTING: usize = 64;

/// Parses a spec file (YAML, of which JSON is a subset) into its protobuf form. A leading byte-order mark is
/// skipped (editors on Windows write one); an error quotes at most the start of any value.
pub fn parse_spec_text(text: &str) -> Result<pb::JobSpec, SpecError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let depth = flow_nesting(text, MAX_SPEC_NESTING);
    if depth > MAX_SPEC_NESTING {
        return Err(SpecError::Malformed(format!(
            "the spec nests [ ] and {{ }} more than {MAX_SPEC_NESTING} levels deep, the limit"
        )));
    }
    let file: JobSpecFile =
        serde_yaml::from_str(text).map_err(|e| SpecError::Malformed(crate::text::cut_message(&e.to_string())))?;
    file_to_proto(file)
}

/// How deep YAML flow collections (`[ ]`, `{ }`) nest in `text`, outside quotes and comments; counting stops
/// once past `limit`. A quote opens only where a scalar can start (`it's` is no quote), as in YAML.
fn flow_nesting(text: &str, limit: usize) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut chars = text.chars().peekable();
    let mut prev = '\n';
    while let Some(c) = chars.next() {
        match c {
            '#' if prev.is_whitespace() => {
                // A comment, to the end of its line.
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
                prev = '\n';
                continue;
            }
            '"' | '\'' if prev.is_whitespace() || matches!(prev, ':' | ',' | '[' | '{' | '-' | '?') => {
                while let Some(q) = chars.next() {
                    match q {
                        '\\' if c == '"' => {
                            chars.next();
                        }
                        '\'' if c == '\'' && chars.peek() == Some(&'\'') => {
                            chars.next();
                        }
                        q if q == c => break,
                        _ => {}
                    }
                }
            }
            '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
                if deepest > limit {
                    return deepest;
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        prev = c;
    }
    deepest
}

/// Converts the file form to the protobuf form sent to the job manager.
pub fn file_to_proto(file: JobSpecFile) -> Result<pb::JobSpec, SpecError> {
    let mut operators = Vec::with_capacity(file.operators.len());
    for op in file.operators {
        let mut config = HashMap::new();
        for (k, v) in op.config {
            let value = crate::job::config_value::from_yaml(v)
                .map_err(|e| op_err(&op.uid, &format!("config.{k}"), e.to_string()))?;
            config.insert(k, crate::job::config_value::to_proto(&value));
        }
        let partitioning = match op.partitioning.as_deref() {
            None | Some("") => Partitioning::Unspecified,
            Some(text) => {
                parse_partitioning(text).ok_or_else(|| op_err(&op.uid, "partitioning", PARTITIONING_CHOICES))?
            }
        };
        let watermarks = match &op.watermarks {
            None => None,
            Some(w) => Some(w.to_proto().map_err(|e| op_err(&op.uid, &format!("watermarks.{}", e.field), e.message))?),
        };
        let schema = match &op.schema {
            None => Vec::new(),
            Some(columns) => {
                crate::job::schema::validate_columns(columns).map_err(|e| op_err(&op.uid, "schema", e.to_string()))?;
                columns.iter().map(pb::ColumnSpec::from).collect()
            }
        };
        operators.push(pb::OperatorSpec {
            schema,
            uid: op.uid,
            kind: op.kind,
            config,
            parallelism: op.parallelism,
            input: op.input.unwrap_or_default(),
            inputs: op.inputs.unwrap_or_default(),
            partitioning: partitioning as i32,
            drop_state_on_change: op.drop_state_on_change,
            uid_stated: op.uid_stated,
            watermarks,
            legacy_config: HashMap::new(),
        });
    }
    let c = file.checkpointing.unwrap_or_default();
    let r = file.restart.unwrap_or_default();
    let cms = |name: &str, v| duration_ms(&format!("checkpointing.{name}"), v);
    let rms = |name: &str, v| duration_ms(&format!("restart.{name}"), v);
    Ok(pb::JobSpec {
        name: file.name,
        parallelism: file.parallelism,
        max_parallelism: file.max_parallelism,
        state_backend: parse_state_backend(file.state_backend.as_deref().unwrap_or_default())? as i32,
        checkpointing: Some(pb::CheckpointConfig {
            interval_ms: cms("interval_ms", c.interval_ms)?,
            timeout_ms: cms("timeout_ms", c.timeout_ms)?,
            min_pause_ms: cms("min_pause_ms", c.min_pause_ms)?,
            max_concurrent: c.max_concurrent,
            retained: c.retained,
            incremental: c.incremental,
            tolerable_failures: c.tolerable_failures,
        }),
        restart: Some(pb::RestartConfig {
            strategy: r.strategy.unwrap_or_default(),
            attempts: r.attempts,
            delay_ms: rms("delay_ms", r.delay_ms)?,
            max_delay_ms: rms("max_delay_ms", r.max_delay_ms)?,
            multiplier: r.multiplier,
            reset_backoff_threshold_ms: rms("reset_backoff_threshold_ms", r.reset_backoff_threshold_ms)?,
            jitter_factor: r.jitter_factor,
            max_failures_per_interval: r.max_failures_per_interval,
            failure_rate_interval_ms: rms("failure_rate_interval_ms", r.failure_rate_interval_ms)?,
        }),
        operators,
        linger_ms: file.linger_ms,
    })
}

// ------------------------------------------------------------------------------------------- resolved form

/// How records travel along an edge: forward (subtask i to subtask i, chains when possible), rebalance
/// (round-robin), broadcast (every record to every subtask) or key-by (by the key group of the record's key).
/// `Unspecified` only exists on the wire: a resolved job never holds it.
pub use weir_proto::Partitioning;
/// The state backend of a job: RocksDB on local disk (default; `Unspecified` on the wire) or in-memory hash maps.
pub use weir_proto::StateBackend;

/// Parses a partitioning as written in a spec file.
pub fn parse_partitioning(s: &str) -> Option<Partitioning> {
    match s {
        "forward" => Some(Partitioning::Forward),
        "rebalance" => Some(Partitioning::Rebalance),
        "broadcast" => Some(Partitioning::Broadcast),
        "key-by" | "keyby" | "hash" => Some(Partitioning::KeyBy),
        _ => None,
    }
}

/// Parses a state backend as written in a spec file.
pub fn parse_state_backend(s: &str) -> Result<StateBackend, SpecError> {
    match s {
        "" | "rocksdb" => Ok(StateBackend::Rocksdb),
        "heap" => Ok(StateBackend::Heap),
        other => Err(job_err("state_backend", format!("unknown backend {} (use rocksdb or heap)", echo(other)))),
    }
}

const PARTITIONING_CHOICES: &str = "must be forward, rebalance, broadcast or key-by";

/// Checkpoint settings with defaults applied (Flink's, except where noted in docs/architecture.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointSettings {
    /// Interval between checkpoint triggers; `None` = periodic checkpoints off.
    pub interval_ms: Option<u64>,
    /// A checkpoint not complete after this long is expired.
    pub timeout_ms: u64,
    /// Minimum pause between the end of one checkpoint and the next trigger.
    pub min_pause_ms: u64,
    /// Checkpoints in flight at once.
    pub max_concurrent: u32,
    /// Completed checkpoints kept.
    pub retained: u32,
    /// Upload only what changed since the last completed checkpoint.
    pub incremental: bool,
    /// Consecutive failed checkpoints tolerated before the job fails over; `None` = unlimited.
    pub tolerable_failures: Option<u32>,
}

/// Restart strategy with defaults applied (Flink's, except where noted in docs/architecture.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RestartSettings {
    /// Never restart: the first failure fails the job.
    None,
    /// Wait `delay_ms` between restarts, at most `attempts` restarts over the job's life.
    FixedDelay {
        /// Maximum number of restarts.
        attempts: u32,
        /// Delay before each restart.
        delay_ms: u64,
    },
    /// Delay grows by `multiplier` per restart up to `max_delay_ms`, and goes back to `initial_delay_ms`
    /// once the job has run `reset_backoff_threshold_ms` without a failure.
    ExponentialDelay {
        /// Restarts allowed before the backoff resets (Flink's `attempts-before-reset-backoff`).
        attempts: u32,
        /// Delay before the first restart.
        initial_delay_ms: u64,
        /// Upper bound of the delay.
        max_delay_ms: u64,
        /// Growth factor per restart.
        multiplier: f64,
        /// A failure this long after the last restart was due starts the backoff (and `attempts`) afresh.
        #[serde(default = "default_reset_backoff_threshold_ms")]
        reset_backoff_threshold_ms: u64,
        /// Each delay moves by up to this fraction of itself, at random, so that jobs do not restart in step.
        // Records written before jitter existed had none; they keep it that way.
        #[serde(default)]
        jitter_factor: f64,
    },
    /// Restart after `delay_ms` unless more than `max_failures_per_interval` failures happened within
    /// `failure_rate_interval_ms`.
    FailureRate {
        /// Failures tolerated within the interval.
        max_failures_per_interval: u32,
        /// Length of the interval.
        failure_rate_interval_ms: u64,
        /// Delay before each restart.
        delay_ms: u64,
    },
}

/// Flink's `restart-strategy.exponential-delay.reset-backoff-threshold` default: one hour.
pub const DEFAULT_RESET_BACKOFF_THRESHOLD_MS: u64 = 3_600_000;

fn default_reset_backoff_threshold_ms() -> u64 {
    DEFAULT_RESET_BACKOFF_THRESHOLD_MS
}

/// The longest delay, interval or timeout a spec may ask for: 7 days. Anything longer is taken for a
/// mistake in units (seconds or microseconds written as milliseconds).
pub const MAX_DURATION_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// The shortest checkpoint interval and timeout (Flink's `MINIMAL_CHECKPOINT_TIME`).
pub const MIN_CHECKPOINT_TIME_MS: u64 = 10;

/// Checks a duration field against `min ..= MAX_DURATION_MS`.
fn check_duration(field: &str, value: u64, min: u64) -> Result<u64, SpecError> {
    if value < min || value > MAX_DURATION_MS {
        return Err(job_err(
            field,
            format!("{value} ms is out of range: use {min} ms to {MAX_DURATION_MS} ms (7 days)"),
        ));
    }
    Ok(value)
}

/// One operator with its effective parallelism, input and partitioning.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResolvedOperator {
    /// Stable id; the key of its state in checkpoints.
    pub uid: String,
    /// Kind in the task manager's registry.
    pub kind: String,
    /// Config as given, typed as the spec wrote it.
    pub config: OperatorConfig,
    /// Effective parallelism.
    pub parallelism: u32,
    /// Index of the input operator in [`ResolvedJob::operators`].
    pub input: Option<usize>,
    /// The input's side output this operator reads (the spec's `input: <uid>.<tag>`), instead of its main output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tag: Option<String>,
    /// A two-input operator's second input (index in [`ResolvedJob::operators`]), partitioned as the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub second_input: Option<usize>,
    /// Partitioning of the input edge.
    pub partitioning: Partitioning,
    /// Source, operator or sink.
    pub role: Role,
    /// Whether it keeps keyed state.
    pub keyed: bool,
    /// A restore drops its state, instead of refusing, when its kind or state signature changed.
    #[serde(default)]
    pub drop_state_on_change: bool,
    /// Its kind's state signature, as the task managers reported it at submission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<crate::job::kind::KindSignature>,
    /// Its uid is the spec's with the state signature folded in ([`stated_uid`]): the spec's `uid_stated: true`.
    #[serde(default)]
    pub uid_stated: bool,
    /// Sources only: how it generates watermarks (`None`: it emits none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermarks: Option<WatermarkStrategy>,
    /// What of its config its state depends on, as text per field ([`state_config`]): recorded with its state in
    /// checkpoints, compared on restore.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub state_config: BTreeMap<String, String>,
}

/// What of an operator's `config` its state depends on, as text per field: the `fields` its kind marks as shaping
/// its state (`unset` where absent), and for a keyed operator the `key` its inputs (`inputs`' configs) key its
/// rows by, as `key (input)` and `key (second input)`. A restore names the operator where one of them changed.
pub fn state_config(
    fields: &[crate::job::kind::FieldInfo],
    config: &OperatorConfig,
    inputs: [Option<&OperatorConfig>; 2],
) -> BTreeMap<String, String> {
    let text = |v: Option<&crate::job::kind::ConfigValue>| match v {
        None => "unset".to_string(),
        Some(crate::job::kind::ConfigValue::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    let mut out: BTreeMap<String, String> =
        fields.iter().filter(|f| f.shapes_state).map(|f| (f.name.clone(), text(config.get(&f.name)))).collect();
    for (name, input) in ["key (input)", "key (second input)"].into_iter().zip(inputs) {
        if let Some(key) = input.and_then(|c| c.get("key")) {
            out.insert(name.to_string(), text(Some(key)));
        }
    }
    out
}

/// `uid` with a state signature's fingerprint folded in, `<uid>@<first 8 hex digits>` (DataDome's `uidStated`):
/// a structural change of the state gives the operator a new uid, so its old state is dropped on purpose, and
/// reported, instead of failing the restore.
pub fn stated_uid(uid: &str, fingerprint: &str) -> String {
    format!("{uid}@{}", fingerprint.get(..8).unwrap_or(fingerprint))
}

/// The uid a `uid_stated` operator had before its signature was folded in, if `uid` is one (`base@8 hex`).
pub fn unstated_uid(uid: &str) -> Option<&str> {
    let (base, hex) = uid.rsplit_once('@')?;
    (hex.len() == 8 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then_some(base)
}

/// A validated job with every default applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResolvedJob {
    /// Job name.
    pub name: String,
    /// Default parallelism.
    pub parallelism: u32,
    /// Number of key groups.
    pub max_parallelism: u32,
    /// State backend.
    pub state_backend: StateBackend,
    /// Checkpoint settings.
    pub checkpointing: CheckpointSettings,
    /// Restart strategy.
    pub restart: RestartSettings,
    /// Operators in spec order.
    pub operators: Vec<ResolvedOperator>,
    /// Longest a partly filled batch waits before it is sent, ms.
    #[serde(default = "default_linger_ms")]
    pub linger_ms: u64,
}

/// How long a partly filled batch waits by default: a few milliseconds, so latency stays low at low rates while
/// a busy edge fills its batches long before (Flink's buffer timeout is 100 ms).
pub const DEFAULT_LINGER_MS: u64 = 5;
/// The longest linger a spec may ask for.
pub const MAX_LINGER_MS: i64 = 60_000;

fn default_linger_ms() -> u64 {
    DEFAULT_LINGER_MS
}

/// Most operators in one job. Validation and planning are linear in it; the limit keeps one submission from
/// holding the job manager for long, and is far above what a real job has.
pub const MAX_OPERATORS: usize = 1024;
/// Largest encoded spec (the gRPC message limit is 4 MiB; a spec is rarely over a few KiB).
pub const MAX_SPEC_BYTES: usize = 1 << 20;
/// Longest job name, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Longest uid, in bytes.
pub const MAX_UID_BYTES: usize = 128;
/// Longest operator kind, input uid or config key, in bytes.
pub const MAX_FIELD_BYTES: usize = 128;
/// Longest config value, in bytes (a schema given inline fits).
pub const MAX_CONFIG_VALUE_BYTES: usize = 64 * 1024;
/// Checks the spec's size limits before anything else looks at it: a spec over them is refused naming the
/// limit, in time linear in its size.
pub fn check_limits(spec: &pb::JobSpec) -> Result<(), SpecError> {
    let over = |what: &str, len: usize, limit: usize| format!("{what} is {len} bytes, over the limit of {limit} bytes");
    if spec.operators.len() > MAX_OPERATORS {
        return Err(job_err(
            "operators",
            format!("{} operators, over the limit of {MAX_OPERATORS} operators per job", spec.operators.len()),
        ));
    }
    if spec.name.len() > MAX_NAME_BYTES {
        return Err(job_err("name", over("it", spec.name.len(), MAX_NAME_BYTES)));
    }
    for (i, op) in spec.operators.iter().enumerate() {
        let who = if op.uid.is_empty() { format!("#{}", i + 1) } else { shortened(&op.uid) };
        let who = who.as_str();
        if op.uid.len() > MAX_UID_BYTES {
            return Err(op_err(who, "uid", over("it", op.uid.len(), MAX_UID_BYTES)));
        }
        for (field, value) in [("kind", &op.kind), ("input", &op.input)] {
            if value.len() > MAX_FIELD_BYTES {
                return Err(op_err(who, field, over("it", value.len(), MAX_FIELD_BYTES)));
            }
        }
        if op.inputs.len() > 2 {
            return Err(op_err(who, "inputs", format!("{} inputs: an operator reads at most two", op.inputs.len())));
        }
        if let Some(long) = op.inputs.iter().find(|v| v.len() > MAX_FIELD_BYTES) {
            return Err(op_err(who, "inputs", over("an input", long.len(), MAX_FIELD_BYTES)));
        }
        if !op.legacy_config.is_empty() {
            return Err(op_err(
                who,
                "config",
                "sent as text by a client older than this cluster, which reads typed config values: upgrade the client",
            ));
        }
        for (k, v) in &op.config {
            if k.len() > MAX_FIELD_BYTES {
                return Err(op_err(who, "config", over(&format!("the key {}", echo(k)), k.len(), MAX_FIELD_BYTES)));
            }
            let size = crate::job::config_value::size(v);
            if size > MAX_CONFIG_VALUE_BYTES {
                return Err(op_err(who, &format!("config.{k}"), over("the value", size, MAX_CONFIG_VALUE_BYTES)));
            }
        }
    }
    // Every part within its limit, the whole may still be too much (many large values).
    let size = prost::Message::encoded_len(spec);
    if size > MAX_SPEC_BYTES {
        return Err(job_err("spec", over("the encoded spec", size, MAX_SPEC_BYTES)));
    }
    Ok(())
}

fn valid_uid(uid: &str) -> bool {
    !uid.is_empty()
        && uid.len() <= MAX_UID_BYTES
        && uid.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !uid.starts_with('.')
}

/// Checks the record schema of every edge: what an operator emits (declared by its kind, or by the spec's
/// `schema:` for kinds that do not declare it) must have every column its consumer needs, of the same type.
/// Edges whose producer's schema is unknown are not checked. The graph has no cycle.
fn check_schemas(spec: &pb::JobSpec, operators: &[ResolvedOperator], kinds: &dyn KindCatalog) -> Result<(), SpecError> {
    use crate::job::schema::{key_column, validate_columns, OutputSchema};
    // `operators` is in spec order, the same index is the operator as written.
    let mut emitted: Vec<Option<Option<Vec<Column>>>> = vec![None; operators.len()];
    fn emits(
        i: usize,
        spec: &pb::JobSpec,
        operators: &[ResolvedOperator],
        kinds: &dyn KindCatalog,
        memo: &mut Vec<Option<Option<Vec<Column>>>>,
    ) -> Result<Option<Vec<Column>>, SpecError> {
        if let Some(known) = &memo[i] {
            return Ok(known.clone());
        }
        let op = &spec.operators[i];
        let declared: Option<Vec<Column>> =
            (!op.schema.is_empty()).then(|| op.schema.iter().map(Column::from).collect());
        if let Some(columns) = &declared {
            validate_columns(columns).map_err(|e| op_err(&op.uid, "schema", e.to_string()))?;
        }
        let kind = kinds.info(&op.kind).map(|k| &k.output);
        let out = match (kind, declared) {
            (Some(OutputSchema::Columns(c)), Some(d)) if *c != d => {
                return Err(op_err(
                    &op.uid,
                    "schema",
                    format!("kind {:?} declares the columns it emits ({}); leave schema out", op.kind, listed(c)),
                ))
            }
            (Some(OutputSchema::Columns(c)), _) => Some(c.clone()),
            (Some(OutputSchema::SameAsInput), Some(_)) => {
                return Err(op_err(&op.uid, "schema", format!("kind {:?} emits its input's columns", op.kind)))
            }
            (Some(OutputSchema::SameAsInput), None) => reads(i, spec, operators, kinds, memo)?,
            (Some(OutputSchema::FromConfig), Some(_)) => {
                return Err(op_err(
                    &op.uid,
                    "schema",
                    format!("kind {:?} works its columns out from its config", op.kind),
                ))
            }
            (Some(OutputSchema::FromConfig), None) if operators[i].input.is_none() => {
                // A source: its columns follow from its config alone.
                match kinds.derived_output(&op.kind, &operators[i].config, &[]) {
                    None => None,
                    Some(Ok(columns)) => Some(columns),
                    Some(Err(e)) => return Err(config_err(&op.uid, e)),
                }
            }
            (Some(OutputSchema::FromConfig), None) => {
                let first = reads(i, spec, operators, kinds, memo)?;
                let second = match operators[i].second_input {
                    Some(u) => Some(emits(u, spec, operators, kinds, memo)?),
                    None => None,
                };
                let inputs: Option<Vec<Vec<Column>>> = match (first, second) {
                    (Some(a), None) => Some(vec![a]),
                    (Some(a), Some(Some(b))) => Some(vec![a, b]),
                    _ => None,
                };
                match inputs {
                    None => None,
                    Some(inputs) => match kinds.derived_output(&op.kind, &operators[i].config, &inputs) {
                        None => None,
                        Some(Ok(columns)) => Some(columns),
                        Some(Err(e)) => return Err(config_err(&op.uid, e)),
                    },
                }
            }
            (_, declared) => declared,
        };
        memo[i] = Some(out.clone());
        Ok(out)
    }
    /// The columns operator `i` reads: its input's output, or for a side output (late records) its input's input.
    fn reads(
        i: usize,
        spec: &pb::JobSpec,
        operators: &[ResolvedOperator],
        kinds: &dyn KindCatalog,
        memo: &mut Vec<Option<Option<Vec<Column>>>>,
    ) -> Result<Option<Vec<Column>>, SpecError> {
        match (operators[i].input, &operators[i].input_tag) {
            (None, _) => Ok(None),
            (Some(u), None) => emits(u, spec, operators, kinds, memo),
            (Some(u), Some(_)) => reads(u, spec, operators, kinds, memo),
        }
    }
    fn listed(columns: &[Column]) -> String {
        columns.iter().map(|c| format!("{}: {}", c.name, c.data_type)).collect::<Vec<_>>().join(", ")
    }
    // Inputs first, so that `emits` finds every input's columns already worked out and never recurses
    // further than an edge: a chain of 1,024 operators written last-first must not nest 1,024 calls.
    for i in inputs_first(operators) {
        emits(i, spec, operators, kinds, &mut emitted)?;
    }
    for (i, op) in operators.iter().enumerate() {
        let Some(info) = kinds.info(&spec.operators[i].kind) else { continue };
        let mut needed = info.input_columns.clone();
        if op.keyed && !needed.iter().any(|c| c.name == "key") {
            needed.push(key_column());
        }
        let first = match op.input {
            Some(u) => Some((u, reads(i, spec, operators, kinds, &mut emitted)?)),
            None => None,
        };
        let second = match op.second_input {
            Some(u) => Some((u, emits(u, spec, operators, kinds, &mut emitted)?)),
            None => None,
        };
        if let Some((_, Some(available))) = &first {
            if let Some(Err(e)) = kinds.check_input(&spec.operators[i].kind, &op.config, available) {
                return Err(config_err(&spec.operators[i].uid, e));
            }
        }
        for (u, available) in first.into_iter().chain(second) {
            let Some(available) = available else { continue };
            check_edge(&spec.operators[u], &spec.operators[i], &needed, &available)?;
        }
    }
    Ok(())
}

/// Checks that `available` (what `up` emits) has the columns `needed` by `me`.
fn check_edge(
    up: &pb::OperatorSpec,
    me: &pb::OperatorSpec,
    needed: &[crate::job::schema::Column],
    available: &[crate::job::schema::Column],
) -> Result<(), SpecError> {
    use crate::job::schema::{first_mismatch, Column, Mismatch};
    fn listed(columns: &[Column]) -> String {
        columns.iter().map(|c| format!("{}: {}", c.name, c.data_type)).collect::<Vec<_>>().join(", ")
    }
    let mismatch = match first_mismatch(needed, available) {
        None => return Ok(()),
        Some(Mismatch::Missing(c)) => format!(
            "needs column {:?} ({}) from its input {:?} ({}), which emits no such column (it emits {})",
            c.name,
            c.data_type,
            up.uid,
            up.kind,
            listed(available)
        ),
        Some(Mismatch::Type { needed, found }) => format!(
            "needs column {:?} as {} from its input {:?} ({}), which emits it as {found}",
            needed.name, needed.data_type, up.uid, up.kind
        ),
    };
    let field = if me.inputs.is_empty() { "input" } else { "inputs" };
    Err(op_err(&me.uid, field, mismatch))
}

/// The operator an `input:` names and the side output it reads, if any: a uid (its main output), or
/// `<uid>.<tag>` (its side output `tag`). A uid that itself holds dots is matched whole first.
fn parse_input<'a>(index: &HashMap<&str, usize>, input: &'a str) -> Option<(usize, Option<&'a str>)> {
    if let Some(&i) = index.get(input) {
        return Some((i, None));
    }
    let (uid, tag) = input.rsplit_once('.')?;
    let &i = index.get(uid)?;
    (!tag.is_empty()).then_some((i, Some(tag)))
}

/// An operator's config as kinds read it.
fn config_of(op: &pb::OperatorSpec) -> Result<OperatorConfig, SpecError> {
    op.config
        .iter()
        .map(|(k, v)| {
            let value = crate::job::config_value::from_proto(v)
                .map_err(|e| op_err(&op.uid, &format!("config.{k}"), e.to_string()))?;
            Ok((k.clone(), value))
        })
        .collect()
}

/// A kind's refusal of a field of `uid`'s config, named `config.<field>`.
fn config_err(uid: &str, e: crate::job::kind::ConfigFieldError) -> SpecError {
    op_err(uid, &format!("config.{}", e.field), e.message)
}

/// Validates a spec against the known operator kinds and applies defaults. With a catalog that runs the kinds'
/// declarations (a task manager's), every check; with one that only knows what kinds reported (the job
/// manager's), the checks of the spec's structure.
pub fn resolve(spec: &pb::JobSpec, kinds: &dyn KindCatalog) -> Result<ResolvedJob, SpecError> {
    check_limits(spec)?;
    if spec.name.trim().is_empty() {
        return Err(job_err("name", "is required"));
    }
    let parallelism = match spec.parallelism {
        None => 1,
        Some(0) => return Err(job_err("parallelism", "must be at least 1 (leave it out for 1)")),
        Some(p) => p,
    };
    if spec.operators.is_empty() {
        return Err(job_err("operators", "a job needs at least one operator"));
    }
    let state_backend = match StateBackend::try_from(spec.state_backend) {
        Ok(StateBackend::Unspecified | StateBackend::Rocksdb) => StateBackend::Rocksdb,
        Ok(StateBackend::Heap) => StateBackend::Heap,
        Err(_) => {
            return Err(job_err(
                "state_backend",
                format!("unknown backend {} (use rocksdb or heap)", spec.state_backend),
            ))
        }
    };

    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, op) in spec.operators.iter().enumerate() {
        if !valid_uid(&op.uid) {
            let name = if op.uid.is_empty() { format!("#{}", i + 1) } else { shortened(&op.uid) };
            return Err(op_err(&name, "uid", "must be 1-128 characters of letters, digits, '-', '_' or '.'"));
        }
        if index.insert(op.uid.as_str(), i).is_some() {
            return Err(op_err(&op.uid, "uid", "duplicate uid: every operator needs its own"));
        }
    }

    // Each operator's config read from the wire once; every check below and the resolved job use it.
    let configs: Vec<OperatorConfig> = spec.operators.iter().map(config_of).collect::<Result<_, _>>()?;

    // Windows need event time: an operator of a kind that declares it needs event time, fed by a source
    // without timestamps, is refused.
    let needing_event_time = |o: &&pb::OperatorSpec| kinds.info(&o.kind).is_some_and(|k| k.needs_event_time);
    for (i, op) in spec.operators.iter().enumerate().filter(|(_, o)| needing_event_time(o)) {
        let (mut at, mut at_i) = (op, i);
        for _ in 0..spec.operators.len() {
            match parse_input(&index, &at.input) {
                Some((i, _)) => (at, at_i) = (&spec.operators[i], i),
                None => break,
            }
        }
        if let Some(why) = kinds.lacks_timestamps(&at.kind, &configs[at_i]) {
            return Err(op_err(
                &op.uid,
                "kind",
                format!("{} needs event time, and its source {:?} has no timestamps: {why}", op.kind, at.uid),
            ));
        }
    }

    let mut max_op_parallelism = 0;
    let mut operators = Vec::with_capacity(spec.operators.len());
    for (k, op) in spec.operators.iter().enumerate() {
        let info = kinds.info(&op.kind).ok_or_else(|| {
            let known = kinds.names().join(", ");
            op_err(&op.uid, "kind", format!("unknown operator kind {:?} (known: {known})", op.kind))
        })?;
        let p = op.parallelism.unwrap_or(parallelism);
        if p == 0 {
            return Err(op_err(&op.uid, "parallelism", "must be at least 1"));
        }
        max_op_parallelism = max_op_parallelism.max(p);
        kinds.check_config(&op.kind, &configs[k]).map_err(|e| config_err(&op.uid, e))?;
        let named: Vec<&str> = match (op.input.is_empty(), op.inputs.is_empty()) {
            (true, true) => vec![],
            (false, true) => vec![op.input.as_str()],
            (true, false) => op.inputs.iter().map(String::as_str).collect(),
            (false, false) => return Err(op_err(&op.uid, "inputs", "give input or inputs, not both")),
        };
        let field = if op.inputs.is_empty() { "input" } else { "inputs" };
        let wanted = match info.role {
            Role::Source => 0,
            Role::TwoInput => 2,
            Role::Operator | Role::Sink => 1,
        };
        // (No input at all is refused below, with the other roles.)
        if (named.len() > 1 || (info.role == Role::TwoInput && !named.is_empty())) && named.len() != wanted {
            let why = match wanted {
                2 => format!("kind {:?} joins two inputs: give both, inputs: [first, second]", op.kind),
                _ => format!("kind {:?} reads one input: use input: <uid>", op.kind),
            };
            return Err(op_err(&op.uid, field, why));
        }
        let mut resolved_inputs = Vec::with_capacity(named.len());
        for name in &named {
            match parse_input(&index, name) {
                Some((i, tag)) => resolved_inputs.push((i, tag.map(str::to_string))),
                None => return Err(op_err(&op.uid, field, format!("no operator has uid {name:?}"))),
            }
        }
        let second_input = match resolved_inputs.get(1) {
            None => None,
            Some((_, Some(tag))) => {
                return Err(op_err(&op.uid, field, format!("a two-input operator reads main outputs, not {tag:?}")))
            }
            Some((i, None)) if Some(*i) == resolved_inputs.first().map(|f| f.0) => {
                return Err(op_err(&op.uid, field, "the two inputs must be different operators"))
            }
            Some((i, None)) => Some(*i),
        };
        let (input, input_tag) = match resolved_inputs.into_iter().next() {
            None => (None, None),
            Some((i, tag)) => (Some(i), tag),
        };
        if let (Some(u), Some(tag)) = (input, &input_tag) {
            let up = &spec.operators[u];
            if let Some(SideOutputs { tags, elsewhere }) = kinds.side_outputs(&up.kind, &configs[u]) {
                if !tags.contains(tag) {
                    let why = match elsewhere.into_iter().find(|(t, _)| t == tag) {
                        Some((_, how)) => how,
                        None if tags.is_empty() => format!("kind {:?} has no side outputs", up.kind),
                        None => format!("kind {:?} has side outputs {}", up.kind, tags.join(", ")),
                    };
                    return Err(op_err(&op.uid, "input", format!("{:?} has no side output {tag:?}: {why}", up.uid)));
                }
            }
        }
        match (info.role, input) {
            (Role::Source, Some(_)) => return Err(op_err(&op.uid, "input", "a source takes no input")),
            (Role::Operator | Role::TwoInput | Role::Sink, None) => {
                return Err(op_err(&op.uid, "input", format!("missing: a {} needs an input", info.role.as_str())))
            }
            _ => {}
        }
        let partitioning = match Partitioning::try_from(op.partitioning) {
            Ok(Partitioning::Unspecified) => None,
            Ok(p) => Some(p),
            Err(_) => return Err(op_err(&op.uid, "partitioning", PARTITIONING_CHOICES)),
        };
        if info.keyed && partitioning.is_some_and(|p| p != Partitioning::KeyBy) {
            return Err(op_err(&op.uid, "partitioning", "a keyed operator's input must be partitioned key-by"));
        }
        let watermarks = match &op.watermarks {
            None => None,
            Some(w) => {
                let field = |f: &str| format!("watermarks.{f}");
                let strategy =
                    WatermarkStrategy::from_proto(w).map_err(|e| op_err(&op.uid, &field(e.field), e.message))?;
                if info.role != Role::Source {
                    return Err(op_err(
                        &op.uid,
                        "watermarks",
                        format!("only a source generates watermarks, and {:?} is a {}", op.kind, info.role.as_str()),
                    ));
                }
                if let Some(why) = kinds.lacks_timestamps(&op.kind, &configs[k]) {
                    return Err(op_err(
                        &op.uid,
                        "watermarks",
                        format!("the source has no event timestamps to generate watermarks from: {why}"),
                    ));
                }
                Some(strategy)
            }
        };
        let uid = match (&info.signature, op.uid_stated) {
            (_, false) => op.uid.clone(),
            (Some(sig), true) => stated_uid(&op.uid, &sig.fingerprint),
            (None, true) => {
                return Err(op_err(
                    &op.uid,
                    "uid_stated",
                    format!("kind {:?} reports no state signature to fold into the uid", op.kind),
                ))
            }
        };
        operators.push(ResolvedOperator {
            uid,
            kind: op.kind.clone(),
            config: configs[k].clone(),
            parallelism: p,
            input,
            input_tag,
            second_input,
            partitioning: partitioning.unwrap_or(if info.keyed { Partitioning::KeyBy } else { Partitioning::Forward }),
            role: info.role,
            keyed: info.keyed,
            signature: info.signature.clone(),
            drop_state_on_change: op.drop_state_on_change,
            uid_stated: op.uid_stated,
            watermarks,
            state_config: state_config(
                &info.fields,
                &configs[k],
                if info.keyed { [input, second_input].map(|i| i.map(|i| &configs[i])) } else { [None, None] },
            ),
        });
    }

    if let Some(i) = first_in_cycle(&operators) {
        return Err(op_err(&operators[i].uid, "input", "the inputs form a cycle"));
    }
    check_schemas(spec, &operators, kinds)?;

    // Defaults and checks that need the whole graph.
    for i in 0..operators.len() {
        if let Some(u) = operators[i].second_input {
            let (up, op) = (&operators[u], &operators[i]);
            if up.role == Role::Sink {
                return Err(op_err(&op.uid, "inputs", format!("{:?} is a sink and has no output", up.uid)));
            }
            if op.partitioning == Partitioning::Forward && up.parallelism != op.parallelism {
                return Err(op_err(
                    &op.uid,
                    "partitioning",
                    format!(
                        "forward needs equal parallelism ({} has {}, this has {})",
                        up.uid, up.parallelism, op.parallelism
                    ),
                ));
            }
        }
        let Some(u) = operators[i].input else { continue };
        let up = &operators[u];
        let op = &operators[i];
        if up.role == Role::Sink {
            return Err(op_err(&op.uid, "input", format!("{:?} is a sink and has no output", up.uid)));
        }
        if op.partitioning == Partitioning::Forward && up.parallelism != op.parallelism {
            // `operators` is in spec order: the same index is the operator as written.
            if spec.operators[i].partitioning != Partitioning::Unspecified as i32 {
                return Err(op_err(
                    &op.uid,
                    "partitioning",
                    format!(
                        "forward needs equal parallelism ({} has {}, this has {})",
                        up.uid, up.parallelism, op.parallelism
                    ),
                ));
            }
            operators[i].partitioning = Partitioning::Rebalance;
        }
    }

    let max_parallelism = match spec.max_parallelism {
        Some(m) => {
            if m == 0 || m > UPPER_BOUND_MAX_PARALLELISM {
                return Err(job_err("max_parallelism", format!("must be between 1 and {UPPER_BOUND_MAX_PARALLELISM}")));
            }
            m
        }
        None => default_max_parallelism(max_op_parallelism),
    };
    for op in &operators {
        if op.parallelism > max_parallelism {
            return Err(op_err(
                &op.uid,
                "parallelism",
                format!("{} is above the job's max_parallelism {}", op.parallelism, max_parallelism),
            ));
        }
    }

    let checkpointing = resolve_checkpointing(&spec.checkpointing.unwrap_or_default())?;
    let restart = resolve_restart(&spec.restart.clone().unwrap_or_default())?;
    let linger_ms = match spec.linger_ms {
        None => DEFAULT_LINGER_MS,
        Some(ms) if (0..=MAX_LINGER_MS).contains(&ms) => ms as u64,
        Some(ms) => {
            return Err(job_err(
                "linger_ms",
                format!("{ms} is out of range: 0 (send every batch at once) to {MAX_LINGER_MS}"),
            ))
        }
    };

    Ok(ResolvedJob {
        name: spec.name.clone(),
        parallelism,
        max_parallelism,
        state_backend,
        checkpointing,
        restart,
        operators,
        linger_ms,
    })
}

/// The first operator (in spec order) from which the inputs lead into a cycle, if any: a depth-first walk over
/// every operator's inputs (at most two each), each operator entered once.
fn first_in_cycle(operators: &[ResolvedOperator]) -> Option<usize> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Unseen,
        OnPath,
        Done,
    }
    let inputs = |i: usize| operators[i].input.into_iter().chain(operators[i].second_input);
    let mut mark = vec![Mark::Unseen; operators.len()];
    for start in 0..operators.len() {
        if mark[start] != Mark::Unseen {
            continue;
        }
        // (operator, how many of its inputs were walked)
        let mut stack = vec![(start, 0usize)];
        mark[start] = Mark::OnPath;
        while let Some(top) = stack.last_mut() {
            let (i, k) = *top;
            top.1 += 1;
            match inputs(i).nth(k) {
                None => {
                    mark[i] = Mark::Done;
                    stack.pop();
                }
                Some(u) => match mark[u] {
                    Mark::OnPath => return Some(start),
                    Mark::Done => {}
                    Mark::Unseen => {
                        mark[u] = Mark::OnPath;
                        stack.push((u, 0));
                    }
                },
            }
        }
    }
    None
}

/// The operators in an order that puts each after its inputs (the graph has no cycle: `first_in_cycle` ran).
fn inputs_first(operators: &[ResolvedOperator]) -> Vec<usize> {
    let inputs = |i: usize| operators[i].input.into_iter().chain(operators[i].second_input);
    let mut seen = vec![false; operators.len()];
    let mut order = Vec::with_capacity(operators.len());
    for start in 0..operators.len() {
        if seen[start] {
            continue;
        }
        seen[start] = true;
        // (operator, how many of its inputs were walked): a walk without recursion.
        let mut stack = vec![(start, 0usize)];
        while let Some(top) = stack.last_mut() {
            let (i, k) = *top;
            top.1 += 1;
            match inputs(i).nth(k) {
                None => {
                    order.push(i);
                    stack.pop();
                }
                Some(u) if !seen[u] => {
                    seen[u] = true;
                    stack.push((u, 0));
                }
                Some(_) => {}
            }
        }
    }
    order
}

/// Checkpoint settings with defaults; every value that would be silently useless is refused.
fn resolve_checkpointing(c: &pb::CheckpointConfig) -> Result<CheckpointSettings, SpecError> {
    let interval_ms = match c.interval_ms {
        None => None,
        Some(0) => {
            return Err(job_err(
                "checkpointing.interval_ms",
                "0 is not a checkpoint interval; to run without periodic checkpoints leave interval_ms out \
                 (or set it to null)",
            ))
        }
        Some(i) => Some(check_duration("checkpointing.interval_ms", i, MIN_CHECKPOINT_TIME_MS)?),
    };
    let timeout_ms = match c.timeout_ms {
        None => 600_000,
        Some(0) => return Err(job_err("checkpointing.timeout_ms", "must be positive (default 600000 ms)")),
        Some(t) => check_duration("checkpointing.timeout_ms", t, MIN_CHECKPOINT_TIME_MS)?,
    };
    let min_pause_ms = check_duration("checkpointing.min_pause_ms", c.min_pause_ms.unwrap_or(0), 0)?;
    let max_concurrent = c.max_concurrent.unwrap_or(1);
    if max_concurrent != 1 {
        return Err(job_err("checkpointing.max_concurrent", "only 1 concurrent checkpoint is supported for now"));
    }
    let retained = c.retained.unwrap_or(1);
    if retained == 0 {
        return Err(job_err("checkpointing.retained", "must be at least 1 (the checkpoint to restore from)"));
    }
    Ok(CheckpointSettings {
        interval_ms,
        timeout_ms,
        min_pause_ms,
        max_concurrent,
        retained,
        incremental: c.incremental.unwrap_or(true),
        tolerable_failures: c.tolerable_failures,
    })
}

/// The restart strategy a spec gets when it names none: exponential delay (Flink's default since 1.19 for a
/// job with checkpoints; Weir uses it for every job), from 1 s up to 1 min, so a job that fails at once backs off
/// instead of restarting every second forever.
pub const DEFAULT_RESTART_STRATEGY: &str = "exponential-delay";

/// The restart strategy with Flink's defaults; a setting the chosen strategy does not use is refused
/// rather than ignored.
fn resolve_restart(r: &pb::RestartConfig) -> Result<RestartSettings, SpecError> {
    let strategy = if r.strategy.is_empty() { DEFAULT_RESTART_STRATEGY } else { r.strategy.as_str() };
    let takes: &[&str] = match strategy {
        "fixed-delay" => &["attempts", "delay_ms"],
        "exponential-delay" => {
            &["attempts", "delay_ms", "max_delay_ms", "multiplier", "reset_backoff_threshold_ms", "jitter_factor"]
        }
        "failure-rate" => &["max_failures_per_interval", "failure_rate_interval_ms", "delay_ms"],
        "none" | "no-restart" => &[],
        other => {
            return Err(job_err(
                "restart.strategy",
                format!("unknown strategy {other:?} (use fixed-delay, exponential-delay, failure-rate or none)"),
            ))
        }
    };
    let given = [
        ("attempts", r.attempts.is_some()),
        ("delay_ms", r.delay_ms.is_some()),
        ("max_delay_ms", r.max_delay_ms.is_some()),
        ("multiplier", r.multiplier.is_some()),
        ("reset_backoff_threshold_ms", r.reset_backoff_threshold_ms.is_some()),
        ("jitter_factor", r.jitter_factor.is_some()),
        ("max_failures_per_interval", r.max_failures_per_interval.is_some()),
        ("failure_rate_interval_ms", r.failure_rate_interval_ms.is_some()),
    ];
    if let Some((name, _)) = given.iter().find(|(name, present)| *present && !takes.contains(name)) {
        let takes = if takes.is_empty() { "no settings".to_string() } else { takes.join(", ") };
        return Err(job_err(
            &format!("restart.{name}"),
            format!("does not apply to the {strategy} strategy (it takes {takes})"),
        ));
    }
    let delay = |default: u64, min: u64| check_duration("restart.delay_ms", r.delay_ms.unwrap_or(default), min);
    Ok(match strategy {
        "fixed-delay" => {
            RestartSettings::FixedDelay { attempts: r.attempts.unwrap_or(u32::MAX), delay_ms: delay(1000, 0)? }
        }
        "exponential-delay" => {
            let multiplier = r.multiplier.unwrap_or(1.5);
            if !(1.0..=100.0).contains(&multiplier) {
                return Err(job_err("restart.multiplier", "must be between 1 and 100"));
            }
            let jitter_factor = r.jitter_factor.unwrap_or(0.1);
            if !(0.0..=1.0).contains(&jitter_factor) {
                return Err(job_err("restart.jitter_factor", "must be between 0 and 1"));
            }
            let initial_delay_ms = delay(1000, 1)?;
            let max_delay_ms = match r.max_delay_ms {
                // The default bound never undercuts an initial delay chosen above it.
                None => initial_delay_ms.max(60_000),
                Some(m) => check_duration("restart.max_delay_ms", m, initial_delay_ms).map_err(|_| {
                    job_err(
                        "restart.max_delay_ms",
                        format!(
                            "{m} ms is out of range: use delay_ms ({initial_delay_ms} ms) to {MAX_DURATION_MS} ms \
                             (7 days)"
                        ),
                    )
                })?,
            };
            let reset_backoff_threshold_ms = check_duration(
                "restart.reset_backoff_threshold_ms",
                r.reset_backoff_threshold_ms.unwrap_or(DEFAULT_RESET_BACKOFF_THRESHOLD_MS),
                1,
            )?;
            RestartSettings::ExponentialDelay {
                attempts: r.attempts.unwrap_or(u32::MAX),
                initial_delay_ms,
                max_delay_ms,
                multiplier,
                reset_backoff_threshold_ms,
                jitter_factor,
            }
        }
        "failure-rate" => {
            let max_failures_per_interval = r.max_failures_per_interval.unwrap_or(1);
            if max_failures_per_interval == 0 {
                return Err(job_err(
                    "restart.max_failures_per_interval",
                    "must be at least 1 (for no restarts use strategy: none)",
                ));
            }
            RestartSettings::FailureRate {
                max_failures_per_interval,
                failure_rate_interval_ms: check_duration(
                    "restart.failure_rate_interval_ms",
                    r.failure_rate_interval_ms.unwrap_or(60_000),
                    1,
                )?,
                delay_ms: delay(1000, 0)?,
            }
        }
        _ => RestartSettings::None,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn state_config_holds_the_fields_that_shape_state_and_the_inputs_keys() {
        use crate::job::kind::FieldInfo;
        let field = |name: &str, shapes_state| FieldInfo { name: name.into(), doc: String::new(), shapes_state };
        let fields = [field("aggregates", true), field("carry", false), field("window", true)];
        let config: OperatorConfig = [
            ("aggregates".to_string(), serde_json::json!("COUNT(*) AS n")),
            ("carry".to_string(), serde_json::json!("a")),
        ]
        .into();
        let input: OperatorConfig = [("key".to_string(), serde_json::json!("bid_auction"))].into();
        let got = state_config(&fields, &config, [Some(&input), None]);
        let want: BTreeMap<String, String> = [
            ("aggregates".to_string(), "COUNT(*) AS n".to_string()),
            ("window".to_string(), "unset".to_string()),
            ("key (input)".to_string(), "bid_auction".to_string()),
        ]
        .into();
        assert_eq!(got, want);
        let windowed: OperatorConfig = [("window".to_string(), serde_json::json!({"tumbling_ms": 10}))].into();
        assert_eq!(state_config(&fields, &windowed, [None, None])["window"], r#"{"tumbling_ms":10}"#);
    }

    /// What task managers report of the kinds these tests use: enough for the job manager's checks of a spec's
    /// structure. The checks kinds declare themselves are tested with them, in the task manager.
    pub(crate) fn test_kinds() -> Vec<KindInfo> {
        use crate::job::schema::{key_column, key_value, OutputSchema};
        let kind = |name: &str, role: Role, keyed: bool| KindInfo::new(name, role, keyed, "1");
        vec![
            kind("datagen", Role::Source, false).with_output(OutputSchema::Columns(key_value("int64"))),
            kind("nexmark", Role::Source, false),
            kind("keyed-count", Role::Operator, true)
                .with_input(vec![key_column()])
                .with_output(OutputSchema::Columns(key_value("int64"))),
            kind("window-aggregate", Role::Operator, true).with_input(vec![key_column()]).on_event_time(),
            kind("filter", Role::Operator, false).with_output(OutputSchema::FromConfig),
            kind("project", Role::Operator, false).with_output(OutputSchema::FromConfig),
            kind("join", Role::TwoInput, true).with_input(vec![key_column()]).with_output(OutputSchema::FromConfig),
            kind("file-sink", Role::Sink, false),
            kind("kafka-sink", Role::Sink, false),
            kind("blackhole", Role::Sink, false),
        ]
    }
    use crate::job::kind::KindInfo;

    const DEMO: &str = r#"
name: demo
parallelism: 2
checkpointing: { interval_ms: 1000 }
operators:
  - { uid: events, kind: datagen, config: { count: 1000000, keys: 10000, seed: 1 } }
  - { uid: counts, kind: keyed-count, input: events }
  - { uid: out, kind: file-sink, input: counts, parallelism: 1, config: { path: /tmp/out } }
"#;

    fn resolve_text(text: &str) -> Result<ResolvedJob, SpecError> {
        resolve(&parse_spec_text(text)?, &test_kinds())
    }

    #[test]
    fn demo_resolves_with_defaults() {
        let job = resolve_text(DEMO).unwrap();
        assert_eq!(job.max_parallelism, 128);
        assert_eq!(job.operators[1].partitioning, Partitioning::KeyBy);
        assert_eq!(job.operators[2].partitioning, Partitioning::Rebalance);
        assert_eq!(job.operators[2].parallelism, 1);
        assert_eq!(job.checkpointing.interval_ms, Some(1000));
        assert_eq!(job.checkpointing.timeout_ms, 600_000);
        assert_eq!(job.operators[0].config["count"], 1_000_000);
        // No restart strategy named: exponential delay from 1 s to 1 min, as Flink's default since 1.19.
        assert_eq!(
            job.restart,
            RestartSettings::ExponentialDelay {
                attempts: u32::MAX,
                initial_delay_ms: 1000,
                max_delay_ms: 60_000,
                multiplier: 1.5,
                reset_backoff_threshold_ms: DEFAULT_RESET_BACKOFF_THRESHOLD_MS,
                jitter_factor: 0.1,
            }
        );
    }

    #[test]
    fn backends_and_partitionings_are_typed_on_the_wire_and_unknown_ones_refused() {
        let heap = DEMO.replace("parallelism: 2\n", "parallelism: 2\nstate_backend: heap\n");
        assert_eq!(parse_spec_text(&heap).unwrap().state_backend(), StateBackend::Heap);
        assert_eq!(resolve_text(&heap).unwrap().state_backend, StateBackend::Heap);
        assert_eq!(resolve_text(DEMO).unwrap().state_backend, StateBackend::Rocksdb);
        let e = parse_spec_text(&DEMO.replace("parallelism: 2\n", "parallelism: 2\nstate_backend: memory\n"));
        assert!(e.unwrap_err().to_string().contains("unknown backend \"memory\" (use rocksdb or heap)"));
        let sideways = DEMO.replace("input: events }", "input: events, partitioning: sideways }");
        let e = parse_spec_text(&sideways).unwrap_err().to_string();
        assert!(e.contains("counts") && e.contains("must be forward, rebalance, broadcast or key-by"), "{e}");
        let hash = DEMO.replace("input: events }", "input: events, partitioning: hash }");
        assert_eq!(resolve_text(&hash).unwrap().operators[1].partitioning, Partitioning::KeyBy);
        // A protobuf spec with values this version does not know.
        let mut spec = parse_spec_text(DEMO).unwrap();
        spec.operators[1].partitioning = 99;
        assert!(resolve(&spec, &test_kinds()).unwrap_err().to_string().contains("must be forward"));
        let mut spec = parse_spec_text(DEMO).unwrap();
        spec.state_backend = 7;
        assert!(resolve(&spec, &test_kinds()).unwrap_err().to_string().contains("unknown backend 7"));
    }

    #[test]
    fn uid_stated_folds_the_state_signature_into_the_uid() {
        let mut kinds = test_kinds();
        for k in &mut kinds {
            if k.kind == "keyed-count" {
                k.signature = Some(crate::job::kind::KindSignature {
                    fingerprint: "0123456789abcdef".into(),
                    text: "key: seq<u8>".into(),
                    key: None,
                    states: vec![],
                });
            }
        }
        let stated = DEMO.replace("kind: keyed-count,", "kind: keyed-count, uid_stated: true,");
        let job = resolve(&parse_spec_text(&stated).unwrap(), &kinds).unwrap();
        assert_eq!(job.operators[1].uid, "counts@01234567");
        assert_eq!(job.operators[2].input, Some(1), "inputs still name the spec's uid");
        assert_eq!(unstated_uid(&job.operators[1].uid), Some("counts"));
        assert_eq!(unstated_uid("counts"), None);
        let e = resolve(&parse_spec_text(&stated).unwrap(), &test_kinds()).unwrap_err().to_string();
        assert!(e.contains("uid_stated") && e.contains("no state signature"), "{e}");
    }

    fn err_of(text: &str) -> String {
        resolve_text(text).unwrap_err().to_string()
    }

    #[test]
    fn linger_defaults_to_a_few_milliseconds_and_is_bounded() {
        assert_eq!(resolve_text(DEMO).unwrap().linger_ms, DEFAULT_LINGER_MS);
        let with = |ms: &str| DEMO.replace("parallelism: 2\n", &format!("parallelism: 2\nlinger_ms: {ms}\n"));
        assert_eq!(resolve_text(&with("0")).unwrap().linger_ms, 0);
        assert_eq!(resolve_text(&with("60000")).unwrap().linger_ms, 60_000);
        for bad in ["-1", "60001"] {
            let e = err_of(&with(bad));
            assert!(e.contains("linger_ms") && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn cycles_are_rejected() {
        let text = r#"
name: cyc
operators:
  - { uid: src, kind: datagen }
  - { uid: a, kind: keyed-count, input: b }
  - { uid: b, kind: keyed-count, input: a }
"#;
        assert!(err_of(text).contains("cycle"));
        let self_loop = "name: s\noperators:\n  - { uid: a, kind: keyed-count, input: a }\n";
        assert!(err_of(self_loop).contains("cycle"));
    }

    #[test]
    fn checkpoint_and_restart_settings_are_checked() {
        let with = |block: &str| DEMO.replace("checkpointing: { interval_ms: 1000 }", block);
        let cases: &[(&str, &str)] = &[
            ("checkpointing: { interval_ms: 0 }", "\"checkpointing.interval_ms\": 0 is not a checkpoint interval"),
            ("checkpointing: { interval_ms: 5 }", "\"checkpointing.interval_ms\": 5 ms is out of range: use 10 ms"),
            ("checkpointing: { interval_ms: 604800001 }", "(7 days)"),
            ("checkpointing: { timeout_ms: 0 }", "\"checkpointing.timeout_ms\": must be positive"),
            ("checkpointing: { timeout_ms: 1000000000000 }", "\"checkpointing.timeout_ms\": 1000000000000 ms is out"),
            ("checkpointing: { min_pause_ms: 700000000 }", "\"checkpointing.min_pause_ms\""),
            ("checkpointing: { retained: 0 }", "\"checkpointing.retained\": must be at least 1"),
            ("restart: { strategy: fixd-delay }", "\"restart.strategy\": unknown strategy \"fixd-delay\""),
            ("restart: { delay_ms: 604800001 }", "\"restart.delay_ms\": 604800001 ms is out of range"),
            ("restart: { strategy: exponential-delay, delay_ms: 0 }", "\"restart.delay_ms\": 0 ms is out of range"),
            ("restart: { strategy: exponential-delay, delay_ms: 500, max_delay_ms: 100 }", "\"restart.max_delay_ms\""),
            ("restart: { strategy: exponential-delay, jitter_factor: 1.5 }", "\"restart.jitter_factor\""),
            ("restart: { strategy: exponential-delay, multiplier: 0.5 }", "\"restart.multiplier\""),
            ("restart: { strategy: exponential-delay, reset_backoff_threshold_ms: 0 }", "reset_backoff_threshold_ms"),
            ("restart: { strategy: failure-rate, max_failures_per_interval: 0 }", "max_failures_per_interval"),
            ("restart: { strategy: failure-rate, failure_rate_interval_ms: 0 }", "failure_rate_interval_ms"),
            (
                "restart: { strategy: fixed-delay, multiplier: 2 }",
                "\"restart.multiplier\": does not apply to the fixed-delay",
            ),
            ("restart: { strategy: none, attempts: 3 }", "\"restart.attempts\": does not apply to the none strategy"),
            ("restart: { strategy: failure-rate, attempts: 3 }", "\"restart.attempts\": does not apply"),
        ];
        for (block, expected) in cases {
            let e = err_of(&with(block));
            assert!(e.contains(expected), "{block}: {e}");
        }
        // Negative numbers cannot be sent to the job manager: the file form refuses them.
        let e = err_of(&with("checkpointing: { interval_ms: -1000 }"));
        assert!(e.contains("job field \"checkpointing.interval_ms\": -1000 is negative"), "{e}");
        let e = err_of(&with("restart: { delay_ms: -5 }"));
        assert!(e.contains("job field \"restart.delay_ms\": -5 is negative"), "{e}");

        // Off is said by leaving the interval out (or null).
        for off in ["checkpointing: { interval_ms: null }", "checkpointing: { timeout_ms: 1000 }", ""] {
            assert_eq!(resolve_text(&with(off)).unwrap().checkpointing.interval_ms, None, "{off}");
        }
        let bounds = resolve_text(&with("checkpointing: { interval_ms: 10, timeout_ms: 604800000 }")).unwrap();
        assert_eq!((bounds.checkpointing.interval_ms, bounds.checkpointing.timeout_ms), (Some(10), MAX_DURATION_MS));

        let exp = resolve_text(&with("restart: { strategy: exponential-delay }")).unwrap().restart;
        assert_eq!(
            exp,
            RestartSettings::ExponentialDelay {
                attempts: u32::MAX,
                initial_delay_ms: 1000,
                max_delay_ms: 60_000,
                multiplier: 1.5,
                reset_backoff_threshold_ms: 3_600_000,
                jitter_factor: 0.1,
            }
        );
        let long = resolve_text(&with("restart: { strategy: exponential-delay, delay_ms: 120000 }")).unwrap().restart;
        assert!(matches!(long, RestartSettings::ExponentialDelay { max_delay_ms: 120_000, .. }), "{long:?}");
        let rate = resolve_text(&with("restart: { strategy: failure-rate }")).unwrap().restart;
        assert_eq!(
            rate,
            RestartSettings::FailureRate {
                max_failures_per_interval: 1,
                failure_rate_interval_ms: 60_000,
                delay_ms: 1000
            }
        );
        let fixed = resolve_text(&with("restart: { strategy: fixed-delay, attempts: 2, delay_ms: 0 }")).unwrap();
        assert_eq!(fixed.restart, RestartSettings::FixedDelay { attempts: 2, delay_ms: 0 });
        assert_eq!(resolve_text(&with("restart: { strategy: none }")).unwrap().restart, RestartSettings::None);
    }

    #[test]
    fn records_from_before_the_backoff_reset_still_load() {
        let old = r#"{"ExponentialDelay":{"attempts":3,"initial_delay_ms":100,"max_delay_ms":250,"multiplier":2.0}}"#;
        let r: RestartSettings = serde_json::from_str(old).unwrap();
        assert_eq!(
            r,
            RestartSettings::ExponentialDelay {
                attempts: 3,
                initial_delay_ms: 100,
                max_delay_ms: 250,
                multiplier: 2.0,
                reset_backoff_threshold_ms: DEFAULT_RESET_BACKOFF_THRESHOLD_MS,
                jitter_factor: 0.0,
            }
        );
    }

    /// A source and a chain of `n - 1` counters, in protobuf form.
    fn chain(n: usize) -> pb::JobSpec {
        let mut operators = vec![pb::OperatorSpec { uid: "op-0".into(), kind: "datagen".into(), ..Default::default() }];
        for i in 1..n {
            operators.push(pb::OperatorSpec {
                uid: format!("op-{i}"),
                kind: "keyed-count".into(),
                input: format!("op-{}", i - 1),
                ..Default::default()
            });
        }
        pb::JobSpec { name: "chain".into(), operators, ..Default::default() }
    }

    /// The job manager resolves specs on threads of 2 MiB: the longest chain there may be, written last operator
    /// first (so that working out each one's columns meets its input unworked), resolves on a small stack.
    #[test]
    fn the_longest_chain_written_backwards_resolves_on_a_small_stack() {
        let mut spec = chain(MAX_OPERATORS);
        spec.operators.reverse();
        let job = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || resolve(&spec, &test_kinds()).map(|j| j.operators.len()))
            .unwrap()
            .join()
            .expect("resolving overflowed a small stack");
        assert_eq!(job.unwrap(), MAX_OPERATORS);
    }

    /// Hostile spec files: deep nesting is refused at once, a byte-order mark is no error, and an error quotes
    /// little of a long value.
    #[test]
    fn hostile_spec_files_are_refused_quickly_and_echo_little() {
        let deep = [
            ("a flow list", format!("name: x\noperators: {}{}", "[".repeat(100_000), "]".repeat(100_000))),
            ("a flow map", format!("name: x\noperators: [{}1{}]", "{a: ".repeat(50_000), "}".repeat(50_000))),
            ("JSON", format!("{{\"name\": \"x\", \"operators\": {}{}}}", "[".repeat(100_000), "]".repeat(100_000))),
        ];
        for (what, text) in deep {
            let began = std::time::Instant::now();
            let e = parse_spec_text(&text).unwrap_err().to_string();
            assert!(began.elapsed() < std::time::Duration::from_secs(1), "{what}: {:?}", began.elapsed());
            assert!(e.contains("more than 64 levels"), "{what}: {e}");
        }
        // Block nesting (one more space per level: 200 KB holds ~630 levels) is the YAML parser's to refuse.
        let mut block = String::from("name: x\noperators:\n");
        for level in 0..600 {
            block.push_str(&format!("{}a:\n", " ".repeat(level + 1)));
        }
        let began = std::time::Instant::now();
        assert!(parse_spec_text(&block).is_err());
        assert!(began.elapsed() < std::time::Duration::from_secs(2), "block nesting: {:?}", began.elapsed());
        // Brackets inside quotes and comments do not count.
        let quoted = format!("name: '{}'  # {}\noperators: []\n", "[".repeat(100), "{".repeat(100));
        assert_eq!(parse_spec_text(&quoted).unwrap().name, "[".repeat(100));
        assert!(parse_spec_text("name: it's [ok]\noperators: []\n").is_ok());
        // A byte-order mark, as some editors write.
        assert_eq!(parse_spec_text("\u{feff}name: bom\noperators: []\n").unwrap().name, "bom");
        // A one-line spec of 200 KB: the error quotes its start only.
        let e = parse_spec_text(&format!("name: x\noperators: \"{}\"", "o".repeat(200_000))).unwrap_err().to_string();
        assert!(e.len() < 400, "{} bytes: {}", e.len(), &e[..200]);
    }

    #[test]
    fn a_cycle_at_the_end_of_a_long_chain_is_found_and_named() {
        // The chain's first operator is fed by its last: every operator is on the cycle; the first in spec
        // order is named (walking each once, not once per start).
        let mut spec = chain(MAX_OPERATORS);
        spec.operators[0].kind = "keyed-count".into();
        spec.operators[0].input = format!("op-{}", MAX_OPERATORS - 1);
        let e = resolve(&spec, &test_kinds()).unwrap_err().to_string();
        assert!(e.contains("\"op-0\"") && e.contains("cycle"), "{e}");
        // A side branch that runs into the cycle is named when it comes first.
        let mut ops = chain(4).operators;
        ops[1].input = "op-3".into();
        ops.insert(
            0,
            pb::OperatorSpec {
                uid: "side".into(),
                kind: "keyed-count".into(),
                input: "op-2".into(),
                ..Default::default()
            },
        );
        let spec = pb::JobSpec { name: "c".into(), operators: ops, ..Default::default() };
        let e = resolve(&spec, &test_kinds()).unwrap_err().to_string();
        assert!(e.contains("\"side\"") && e.contains("cycle"), "{e}");
    }
}
