//! The job spec: the YAML/JSON file users write, its protobuf form, and validation into a [`ResolvedJob`]
//! with every default applied. Validation names the operator and field of every problem.

use crate::builtin::{validate_builtin_config, KindInfo, Role};
use crate::keygroup::{default_max_parallelism, UPPER_BOUND_MAX_PARALLELISM};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
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
#[derive(Debug, Clone, Deserialize, Serialize)]
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
    /// The operators, sources first is customary but not required.
    pub operators: Vec<OperatorFile>,
}

/// Checkpoint settings as written in a spec file.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointingFile {
    #[allow(missing_docs)]
    pub interval_ms: Option<u64>,
    #[allow(missing_docs)]
    pub timeout_ms: Option<u64>,
    #[allow(missing_docs)]
    pub min_pause_ms: Option<u64>,
    #[allow(missing_docs)]
    pub max_concurrent: Option<u32>,
    #[allow(missing_docs)]
    pub retained: Option<u32>,
    #[allow(missing_docs)]
    pub incremental: Option<bool>,
    #[allow(missing_docs)]
    pub tolerable_failures: Option<u32>,
}

/// Restart strategy as written in a spec file.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RestartFile {
    #[allow(missing_docs)]
    pub strategy: Option<String>,
    #[allow(missing_docs)]
    pub attempts: Option<u32>,
    #[allow(missing_docs)]
    pub delay_ms: Option<u64>,
    #[allow(missing_docs)]
    pub max_delay_ms: Option<u64>,
    #[allow(missing_docs)]
    pub multiplier: Option<f64>,
}

/// One operator as written in a spec file.
#[derive(Debug, Clone, Deserialize, Serialize)]
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
    #[serde(default)]
    #[allow(missing_docs)]
    pub parallelism: Option<u32>,
    #[serde(default)]
    #[allow(missing_docs)]
    pub partitioning: Option<String>,
}

/// Parses a spec file (YAML, of which JSON is a subset) into its protobuf form.
pub fn parse_spec_text(text: &str) -> Result<pb::JobSpec, SpecError> {
    let file: JobSpecFile = serde_yaml::from_str(text).map_err(|e| SpecError::Malformed(e.to_string()))?;
    file_to_proto(file)
}

/// Converts the file form to the protobuf form sent to the job manager.
pub fn file_to_proto(file: JobSpecFile) -> Result<pb::JobSpec, SpecError> {
    let mut operators = Vec::with_capacity(file.operators.len());
    for op in file.operators {
        let mut config = HashMap::new();
        for (k, v) in op.config {
            let text = match v {
                serde_yaml::Value::Null => String::new(),
                serde_yaml::Value::Bool(b) => b.to_string(),
                serde_yaml::Value::Number(n) => n.to_string(),
                serde_yaml::Value::String(s) => s,
                _ => return Err(op_err(&op.uid, &format!("config.{k}"), "must be a scalar (number, text or boolean)")),
            };
            config.insert(k, text);
        }
        operators.push(pb::OperatorSpec {
            uid: op.uid,
            kind: op.kind,
            config,
            parallelism: op.parallelism,
            input: op.input.unwrap_or_default(),
            partitioning: op.partitioning.unwrap_or_default(),
        });
    }
    let c = file.checkpointing.unwrap_or_default();
    let r = file.restart.unwrap_or_default();
    Ok(pb::JobSpec {
        name: file.name,
        parallelism: file.parallelism.unwrap_or(0),
        max_parallelism: file.max_parallelism,
        state_backend: file.state_backend.unwrap_or_default(),
        checkpointing: Some(pb::CheckpointConfig {
            interval_ms: c.interval_ms,
            timeout_ms: c.timeout_ms,
            min_pause_ms: c.min_pause_ms,
            max_concurrent: c.max_concurrent,
            retained: c.retained,
            incremental: c.incremental,
            tolerable_failures: c.tolerable_failures,
        }),
        restart: Some(pb::RestartConfig {
            strategy: r.strategy.unwrap_or_default(),
            attempts: r.attempts,
            delay_ms: r.delay_ms,
            max_delay_ms: r.max_delay_ms,
            multiplier: r.multiplier,
        }),
        operators,
    })
}

// ------------------------------------------------------------------------------------------- resolved form

/// How records travel along an edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Partitioning {
    /// Subtask i to subtask i (equal parallelism); chains when possible.
    Forward,
    /// Round-robin over all downstream subtasks.
    Rebalance,
    /// Every record to every downstream subtask.
    Broadcast,
    /// By key group of the record's key.
    KeyBy,
}

impl Partitioning {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "forward" => Some(Self::Forward),
            "rebalance" => Some(Self::Rebalance),
            "broadcast" => Some(Self::Broadcast),
            "key-by" | "keyby" | "hash" => Some(Self::KeyBy),
            _ => None,
        }
    }
}

/// The state backend of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StateBackendKind {
    /// RocksDB on local disk (default).
    Rocksdb,
    /// In-memory hash maps.
    Heap,
}

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

/// Restart strategy with defaults applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RestartSettings {
    /// Never restart: the first failure fails the job.
    None,
    /// Wait `delay_ms` between restarts, at most `attempts` restarts.
    FixedDelay {
        /// Maximum number of restarts.
        attempts: u32,
        /// Delay before each restart.
        delay_ms: u64,
    },
    /// Delay grows by `multiplier` per restart up to `max_delay_ms`.
    ExponentialDelay {
        /// Maximum number of restarts.
        attempts: u32,
        /// Delay before the first restart.
        initial_delay_ms: u64,
        /// Upper bound of the delay.
        max_delay_ms: u64,
        /// Growth factor per restart.
        multiplier: f64,
    },
}

impl RestartSettings {
    /// Delay before restart number `n` (1-based), or `None` when no more restarts are allowed.
    pub fn delay_for(&self, n: u32) -> Option<u64> {
        match self {
            RestartSettings::None => None,
            RestartSettings::FixedDelay { attempts, delay_ms } => (n <= *attempts).then_some(*delay_ms),
            RestartSettings::ExponentialDelay { attempts, initial_delay_ms, max_delay_ms, multiplier } => {
                if n > *attempts {
                    return None;
                }
                let d = *initial_delay_ms as f64 * multiplier.powi(n.saturating_sub(1).min(64) as i32);
                Some((d.min(*max_delay_ms as f64)) as u64)
            }
        }
    }
}

/// One operator with its effective parallelism, input and partitioning.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResolvedOperator {
    /// Stable id; the key of its state in checkpoints.
    pub uid: String,
    /// Kind in the task manager's registry.
    pub kind: String,
    /// Config as given.
    pub config: BTreeMap<String, String>,
    /// Effective parallelism.
    pub parallelism: u32,
    /// Index of the input operator in [`ResolvedJob::operators`].
    pub input: Option<usize>,
    /// Partitioning of the input edge.
    pub partitioning: Partitioning,
    /// Source, operator or sink.
    pub role: Role,
    /// Whether it keeps keyed state.
    pub keyed: bool,
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
    pub state_backend: StateBackendKind,
    /// Checkpoint settings.
    pub checkpointing: CheckpointSettings,
    /// Restart strategy.
    pub restart: RestartSettings,
    /// Operators in spec order.
    pub operators: Vec<ResolvedOperator>,
}

fn valid_uid(uid: &str) -> bool {
    !uid.is_empty()
        && uid.len() <= 128
        && uid.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !uid.starts_with('.')
}

/// Validates a spec against the known operator kinds and applies defaults.
pub fn resolve(spec: &pb::JobSpec, kinds: &[KindInfo]) -> Result<ResolvedJob, SpecError> {
    if spec.name.trim().is_empty() {
        return Err(job_err("name", "is required"));
    }
    let parallelism = if spec.parallelism == 0 { 1 } else { spec.parallelism };
    if spec.operators.is_empty() {
        return Err(job_err("operators", "a job needs at least one operator"));
    }
    let state_backend = match spec.state_backend.as_str() {
        "" | "rocksdb" => StateBackendKind::Rocksdb,
        "heap" => StateBackendKind::Heap,
        other => return Err(job_err("state_backend", format!("unknown backend {other:?} (use rocksdb or heap)"))),
    };

    let kind_map: HashMap<&str, &KindInfo> = kinds.iter().map(|k| (k.kind.as_str(), k)).collect();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, op) in spec.operators.iter().enumerate() {
        if !valid_uid(&op.uid) {
            let name = if op.uid.is_empty() { format!("#{}", i + 1) } else { op.uid.clone() };
            return Err(op_err(&name, "uid", "must be 1-128 characters of letters, digits, '-', '_' or '.'"));
        }
        if index.insert(op.uid.as_str(), i).is_some() {
            return Err(op_err(&op.uid, "uid", "duplicate uid: every operator needs its own"));
        }
    }

    let mut max_op_parallelism = 0;
    let mut operators = Vec::with_capacity(spec.operators.len());
    for op in &spec.operators {
        let info = kind_map.get(op.kind.as_str()).ok_or_else(|| {
            let mut known: Vec<&str> = kind_map.keys().copied().collect();
            known.sort();
            op_err(&op.uid, "kind", format!("unknown operator kind {:?} (known: {})", op.kind, known.join(", ")))
        })?;
        let p = op.parallelism.unwrap_or(parallelism);
        if p == 0 {
            return Err(op_err(&op.uid, "parallelism", "must be at least 1"));
        }
        max_op_parallelism = max_op_parallelism.max(p);
        let config: BTreeMap<String, String> = op.config.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        validate_builtin_config(&op.kind, &config)
            .map_err(|e| op_err(&op.uid, &format!("config.{}", e.field), e.message))?;
        let input = if op.input.is_empty() {
            None
        } else {
            match index.get(op.input.as_str()) {
                Some(&i) => Some(i),
                None => return Err(op_err(&op.uid, "input", format!("no operator has uid {:?}", op.input))),
            }
        };
        match (info.role, input) {
            (Role::Source, Some(_)) => return Err(op_err(&op.uid, "input", "a source takes no input")),
            (Role::Operator | Role::Sink, None) => {
                return Err(op_err(&op.uid, "input", format!("missing: a {} needs an input", info.role.as_str())))
            }
            _ => {}
        }
        let partitioning =
            if op.partitioning.is_empty() {
                None
            } else {
                Some(Partitioning::parse(&op.partitioning).ok_or_else(|| {
                    op_err(&op.uid, "partitioning", "must be forward, rebalance, broadcast or key-by")
                })?)
            };
        if info.keyed && partitioning.is_some_and(|p| p != Partitioning::KeyBy) {
            return Err(op_err(&op.uid, "partitioning", "a keyed operator's input must be partitioned key-by"));
        }
        operators.push(ResolvedOperator {
            uid: op.uid.clone(),
            kind: op.kind.clone(),
            config,
            parallelism: p,
            input,
            partitioning: partitioning.unwrap_or(if info.keyed { Partitioning::KeyBy } else { Partitioning::Forward }),
            role: info.role,
            keyed: info.keyed,
        });
    }

    // Cycles: with one input per operator, following inputs from any operator must reach a source.
    for start in 0..operators.len() {
        let mut seen = HashSet::new();
        let mut cur = start;
        while let Some(next) = operators[cur].input {
            if !seen.insert(cur) {
                return Err(op_err(&operators[start].uid, "input", "the inputs form a cycle"));
            }
            cur = next;
        }
    }

    // Defaults and checks that need the whole graph.
    let ops_snapshot = operators.clone();
    for op in operators.iter_mut() {
        let Some(i) = op.input else { continue };
        let up = &ops_snapshot[i];
        if up.role == Role::Sink {
            return Err(op_err(&op.uid, "input", format!("{:?} is a sink and has no output", up.uid)));
        }
        let explicit = !spec.operators.iter().any(|o| o.uid == op.uid && o.partitioning.is_empty());
        if op.partitioning == Partitioning::Forward && up.parallelism != op.parallelism {
            if explicit {
                return Err(op_err(
                    &op.uid,
                    "partitioning",
                    format!(
                        "forward needs equal parallelism ({} has {}, this has {})",
                        up.uid, up.parallelism, op.parallelism
                    ),
                ));
            }
            op.partitioning = Partitioning::Rebalance;
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

    let c = spec.checkpointing.unwrap_or_default();
    let checkpointing = CheckpointSettings {
        interval_ms: c.interval_ms.filter(|&i| i > 0),
        timeout_ms: c.timeout_ms.unwrap_or(600_000),
        min_pause_ms: c.min_pause_ms.unwrap_or(0),
        max_concurrent: c.max_concurrent.unwrap_or(1),
        retained: c.retained.unwrap_or(1),
        incremental: c.incremental.unwrap_or(true),
        tolerable_failures: c.tolerable_failures,
    };
    if checkpointing.timeout_ms == 0 {
        return Err(job_err("checkpointing.timeout_ms", "must be positive"));
    }
    if checkpointing.max_concurrent != 1 {
        return Err(job_err("checkpointing.max_concurrent", "only 1 concurrent checkpoint is supported for now"));
    }
    if checkpointing.retained == 0 {
        return Err(job_err("checkpointing.retained", "must be at least 1"));
    }

    let r = spec.restart.clone().unwrap_or_default();
    let restart = match r.strategy.as_str() {
        "" | "fixed-delay" => RestartSettings::FixedDelay {
            attempts: r.attempts.unwrap_or(u32::MAX),
            delay_ms: r.delay_ms.unwrap_or(1000),
        },
        "exponential-delay" => {
            let multiplier = r.multiplier.unwrap_or(1.5);
            if !(1.0..=100.0).contains(&multiplier) {
                return Err(job_err("restart.multiplier", "must be between 1 and 100"));
            }
            RestartSettings::ExponentialDelay {
                attempts: r.attempts.unwrap_or(u32::MAX),
                initial_delay_ms: r.delay_ms.unwrap_or(1000),
                max_delay_ms: r.max_delay_ms.unwrap_or(60_000),
                multiplier,
            }
        }
        "none" | "no-restart" => RestartSettings::None,
        other => {
            return Err(job_err(
                "restart.strategy",
                format!("unknown strategy {other:?} (use fixed-delay, exponential-delay or none)"),
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::builtin_kinds;

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
        resolve(&parse_spec_text(text)?, &builtin_kinds())
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
        assert_eq!(job.operators[0].config["count"], "1000000");
    }

    fn err_of(text: &str) -> String {
        resolve_text(text).unwrap_err().to_string()
    }

    #[test]
    fn bad_specs_name_the_problem() {
        let unknown = DEMO.replace("kind: keyed-count", "kind: keyed-cuont");
        assert!(err_of(&unknown).contains("operator \"counts\": field \"kind\": unknown operator kind \"keyed-cuont\""));
        let missing = DEMO.replace("input: events", "input: evnts");
        assert!(err_of(&missing).contains("operator \"counts\": field \"input\": no operator has uid \"evnts\""));
        let no_input = DEMO.replace(", input: events", "");
        assert!(err_of(&no_input).contains("operator \"counts\": field \"input\": missing"));
        let dup = DEMO.replace("uid: out", "uid: counts");
        assert!(err_of(&dup).contains("duplicate uid"));
        let too_wide = DEMO
            .replace("parallelism: 1,", "parallelism: 300,")
            .replace("name: demo", "name: demo\nmax_parallelism: 128");
        assert!(err_of(&too_wide)
            .contains("operator \"out\": field \"parallelism\": 300 is above the job's max_parallelism 128"));
        let zero_keys = DEMO.replace("keys: 10000", "keys: 0");
        assert!(err_of(&zero_keys).contains("operator \"events\": field \"config.keys\": must be at least 1"));
        assert!(err_of("name: x\noperators: [ {uid: a, kind: datagen").starts_with("malformed job spec"));
        assert!(err_of("name: x\nbogus: 1\noperators: []").contains("unknown field `bogus`"));
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
    fn restart_delays() {
        let r = RestartSettings::ExponentialDelay {
            attempts: 3,
            initial_delay_ms: 100,
            max_delay_ms: 250,
            multiplier: 2.0,
        };
        assert_eq!(r.delay_for(1), Some(100));
        assert_eq!(r.delay_for(2), Some(200));
        assert_eq!(r.delay_for(3), Some(250));
        assert_eq!(r.delay_for(4), None);
        assert_eq!(RestartSettings::FixedDelay { attempts: 1, delay_ms: 5 }.delay_for(2), None);
    }
}
