//! Savepoints as the job manager sees them from outside a running job: reading one from its URL, checking it
//! against a job before anything is deployed, summarising it for `weir savepoint inspect`, disposing of it.
//! The decisions ([`verdicts`] and [`Verdicts::outcome`], [`summarize`]) are pure; [`load`], [`check_files`] and
//! [`dispose`] do the object-store I/O.

use std::collections::{BTreeMap, BTreeSet};
use weir_common::checkpoint::{
    paths, restore_root, CheckpointMetadata, DistributionMode, OperatorCheckpoint, RestoreMode, SavepointFormat,
};
use weir_common::deploy::assignment::union_fanout_bytes;
use weir_common::job::spec::{ResolvedJob, ResolvedOperator};
use weir_common::service::store::{Store, StoreError, StoreOptions};
use weir_common::state::serializer::SerializerJudge;
use weir_proto as pb;

/// Why a savepoint cannot be read or used.
#[derive(Debug, thiserror::Error)]
pub enum SavepointError {
    /// Nothing at the URL looks like a savepoint or checkpoint.
    #[error("{url} is not a savepoint or checkpoint directory: {reason}")]
    NotASavepoint {
        /// The URL.
        url: String,
        /// What is missing.
        reason: String,
    },
    /// The `_metadata` is unreadable, truncated or tampered with.
    #[error("the savepoint at {url} cannot be read: {reason}")]
    Corrupt {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The savepoint does not fit the job.
    #[error("cannot start the job from {url}: {reason}")]
    Incompatible {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The store could not be reached.
    #[error("cannot read the savepoint at {url}: {source}")]
    Unavailable {
        /// The URL.
        url: String,
        /// The store error.
        #[source]
        source: StoreError,
    },
}

/// A savepoint read from its directory.
#[derive(Debug, Clone)]
pub struct LoadedSavepoint {
    /// URL of its directory.
    pub url: String,
    /// URL its paths are relative to.
    pub root: String,
    /// Its metadata.
    pub metadata: CheckpointMetadata,
}

/// The directory of a savepoint given by its directory or its `_metadata` (a trailing `/` is accepted).
pub fn dir_of(url: &str) -> &str {
    let dir = url.trim().trim_end_matches('/');
    dir.strip_suffix(paths::METADATA_FILE).and_then(|d| d.strip_suffix('/')).unwrap_or(dir)
}

/// Opens the store of a savepoint directory (trailing `/` and a trailing `/_metadata` are accepted).
pub fn open_dir(url: &str, opts: &StoreOptions) -> Result<(String, Store), SavepointError> {
    let dir = dir_of(url).to_string();
    if !dir.contains("://") {
        return Err(SavepointError::NotASavepoint {
            url: url.to_string(),
            reason: "expected a URL such as file:///dir/savepoint-… or s3://bucket/…".into(),
        });
    }
    let store = Store::open_existing(&dir, opts)
        .map_err(|e| SavepointError::NotASavepoint { url: url.to_string(), reason: e.to_string() })?;
    Ok((dir, store))
}

/// Reads and checks the `_metadata` of the savepoint (or retained checkpoint) at `url`.
pub async fn load(url: &str, opts: &StoreOptions) -> Result<LoadedSavepoint, SavepointError> {
    let (dir, store) = open_dir(url, opts)?;
    let bytes = match store.get(paths::METADATA_FILE).await {
        Ok(b) => b,
        Err(StoreError::NotFound(_)) => {
            return Err(SavepointError::NotASavepoint { url: dir, reason: "it has no _metadata file".into() })
        }
        Err(source) => return Err(SavepointError::Unavailable { url: dir, source }),
    };
    let metadata = CheckpointMetadata::from_bytes(&bytes)
        .map_err(|e| SavepointError::Corrupt { url: dir.clone(), reason: e.to_string() })?;
    let root = restore_root(&dir, &metadata);
    Ok(LoadedSavepoint { url: dir, root, metadata })
}

/// Checks that every file the savepoint references exists with the size its metadata says.
pub async fn check_files(sp: &LoadedSavepoint, opts: &StoreOptions) -> Result<(), SavepointError> {
    let store = Store::open_existing(&sp.root, opts)
        .map_err(|e| SavepointError::NotASavepoint { url: sp.url.clone(), reason: e.to_string() })?;
    // One listing per directory instead of one request per file.
    let dirs: BTreeSet<&str> = sp.metadata.files().map(|f| f.path.rsplit_once('/').map_or("", |(d, _)| d)).collect();
    let mut present = std::collections::HashSet::new();
    for d in dirs {
        let listing =
            store.list(d).await.map_err(|source| SavepointError::Unavailable { url: sp.url.clone(), source })?;
        present.extend(listing);
    }
    for f in sp.metadata.files() {
        if !present.contains(&f.path) {
            return Err(SavepointError::Corrupt {
                url: sp.url.clone(),
                reason: format!("state file {} is missing", f.path),
            });
        }
    }
    Ok(())
}

/// What a restore does with one operator's (or one state's) stored state: `weir savepoint check`'s verdicts, the
/// protocol's enum (ordered from the mildest to the worst).
pub use weir_proto::Verdict;

/// The verdict on one operator and its states.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorVerdict {
    /// Operator uid.
    pub uid: String,
    /// What happens to its state.
    pub verdict: Verdict,
    /// Why (empty when restored as is).
    pub reason: String,
    /// Its states by name: each stored one, and those its new version declares that the savepoint lacks.
    pub states: Vec<StateVerdict>,
    /// Whether the job still has the uid.
    pub in_job: bool,
    /// Dropped with the operator's `drop_state_on_change: true`, or the old state of a `uid_stated` operator whose
    /// signature changed: no `--allow-non-restored-state` needed.
    pub permitted: bool,
}

/// The verdict on one state of an operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateVerdict {
    /// State name.
    pub name: String,
    /// What happens to it.
    pub verdict: Verdict,
    /// Why (empty when restored as is).
    pub reason: String,
    /// The schema it was written with, when it is migrated or incompatible.
    pub from: String,
    /// The schema the new version reads it with, likewise.
    pub to: String,
}

impl StateVerdict {
    fn new(name: &str, verdict: Verdict, reason: impl Into<String>) -> Self {
        StateVerdict { name: name.to_string(), verdict, reason: reason.into(), from: String::new(), to: String::new() }
    }
}

/// The verdicts of [`verdicts`]: one per operator, and a reason that makes every stored operator incompatible
/// (another max parallelism), said once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdicts {
    /// A reason that concerns the whole savepoint, not one operator.
    pub global: Option<String>,
    /// Per operator of the job, then per stored uid the job lacks.
    pub operators: Vec<OperatorVerdict>,
}

/// The pre-flight check of restoring `sp` into `job`, per operator: what the restore would do with each
/// stored state, before anything is deployed. `explicit_max_parallelism` is the max parallelism the spec set
/// (unset adopts the savepoint's, see [`adopt_max_parallelism`]); `judge` resolves the states' serializers.
pub fn verdicts(
    sp: &LoadedSavepoint,
    job: &ResolvedJob,
    explicit_max_parallelism: Option<u32>,
    union_fanout_limit: u64,
    judge: &dyn SerializerJudge,
) -> Verdicts {
    let meta = &sp.metadata;
    let global = max_parallelism_problem(meta, job, explicit_max_parallelism);
    let mut out = Vec::new();
    for op in &job.operators {
        let Some(stored) = meta.operators.get(&op.uid) else {
            out.push(OperatorVerdict {
                uid: op.uid.clone(),
                verdict: Verdict::New,
                reason: String::new(),
                states: vec![],
                in_job: true,
                permitted: false,
            });
            continue;
        };
        let same_verdict = |verdict: Verdict| -> Vec<StateVerdict> {
            state_names(stored).iter().map(|n| StateVerdict::new(n, verdict, "")).collect()
        };
        let (verdict, reason, states) = match (global.clone(), state_change(stored, op)) {
            (Some(g), _) => (Verdict::Incompatible, g, same_verdict(Verdict::Incompatible)),
            (None, Some(change)) => (Verdict::Dropped, change, same_verdict(Verdict::Dropped)),
            (None, None) => {
                let (verdict, reason, states) = match per_state(stored, op, judge) {
                    Some(judged) => judged,
                    None => (Verdict::Restored, String::new(), same_verdict(Verdict::Restored)),
                };
                match restore_problem(stored, op, job, union_fanout_limit) {
                    Some(problem) if verdict <= Verdict::Migrated => {
                        (Verdict::Incompatible, problem, same_verdict(Verdict::Incompatible))
                    }
                    _ => (verdict, reason, states),
                }
            }
        };
        let permitted = verdict == Verdict::Dropped && op.drop_state_on_change;
        out.push(OperatorVerdict { uid: op.uid.clone(), verdict, reason, states, in_job: true, permitted });
    }
    let uids: BTreeSet<&str> = job.operators.iter().map(|o| o.uid.as_str()).collect();
    for (uid, stored) in meta.operators.iter().filter(|(u, _)| !uids.contains(u.as_str())) {
        // The state of a `uid_stated` operator whose signature changed since: dropped on purpose.
        let restated = weir_common::job::spec::unstated_uid(uid).and_then(|base| {
            job.operators.iter().find(|o| o.uid_stated && weir_common::job::spec::unstated_uid(&o.uid) == Some(base))
        });
        let reason = match restated {
            Some(now) => format!(
                "its state signature changed, and with it the uid_stated operator's uid (now {:?}): its old state is \
                 dropped on purpose",
                now.uid
            ),
            None => "the job has no operator with this uid".into(),
        };
        out.push(OperatorVerdict {
            uid: uid.clone(),
            verdict: Verdict::Dropped,
            reason,
            states: state_names(stored).iter().map(|n| StateVerdict::new(n, Verdict::Dropped, "")).collect(),
            in_job: false,
            permitted: restated.is_some(),
        });
    }
    Verdicts { global, operators: out }
}

/// Why the savepoint's max parallelism does not fit the job, if it does not (every stored operator is then
/// incompatible, for this one reason).
fn max_parallelism_problem(meta: &CheckpointMetadata, job: &ResolvedJob, explicit: Option<u32>) -> Option<String> {
    match explicit {
        Some(m) if m != meta.max_parallelism => Some(format!(
            "the savepoint's keyed state has max_parallelism {} and the job sets {m}; max_parallelism can never \
             change for a job's state (leave it unset to adopt {})",
            meta.max_parallelism, meta.max_parallelism
        )),
        _ if job.max_parallelism != meta.max_parallelism => Some(format!(
            "the savepoint's max_parallelism is {} but the job's is {}",
            meta.max_parallelism, job.max_parallelism
        )),
        _ => None,
    }
}

/// The names of every state an operator stored (keyed and operator state), sorted.
fn state_names(stored: &OperatorCheckpoint) -> Vec<String> {
    let mut names = BTreeSet::new();
    for s in &stored.subtasks {
        names.extend(s.keyed.iter().flat_map(|k| k.states.iter().map(|st| st.name.clone())));
        names.extend(s.operator_state.iter().flat_map(|h| h.states.iter().map(|st| st.name.clone())));
    }
    names.into_iter().collect()
}

/// Why restoring an operator's stored state into `op` would fail, if it would.
fn restore_problem(
    stored: &OperatorCheckpoint,
    op: &ResolvedOperator,
    job: &ResolvedJob,
    limit: u64,
) -> Option<String> {
    let fanout = union_fanout_bytes(stored, op.parallelism);
    if fanout > limit {
        return Some(format!(
            "its union state ({} bytes) restored at parallelism {} would be read {} times, {} bytes in all, over \
             the union-state fan-out limit of {} bytes (--union-state-fanout-limit)",
            fanout / op.parallelism.max(1) as u64,
            op.parallelism,
            op.parallelism,
            fanout,
            limit
        ));
    }
    let native_rocks = stored
        .subtasks
        .iter()
        .filter_map(|s| s.keyed.as_ref())
        .any(|k| k.backend == weir_common::checkpoint::SnapshotFormat::Rocksdb);
    if native_rocks && job.state_backend != weir_common::job::spec::StateBackend::Rocksdb {
        return Some(
            "the savepoint holds native RocksDB state and the job uses the heap backend; take a canonical \
             savepoint (--format canonical) to change backends"
                .into(),
        );
    }
    None
}

/// One state a restore drops (`--allow-non-restored-state`, `drop_state_on_change`, `uid_stated`), as the job's
/// status reports it after the restore.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DroppedState {
    /// The operator uid the state was stored under.
    pub uid: String,
    /// The state's name (empty when the operator stored no named state).
    pub state: String,
    /// Why it is dropped.
    pub reason: String,
}

impl From<&DroppedState> for pb::DroppedState {
    fn from(d: &DroppedState) -> Self {
        pb::DroppedState { uid: d.uid.clone(), state: d.state.clone(), reason: d.reason.clone() }
    }
}

impl OperatorVerdict {
    /// `operator "uid" VERDICT: reason`, then a line per state (with its reason, if it has its own).
    fn describe(&self) -> String {
        let mut text = format!("operator {:?} {}", self.uid, self.verdict.name());
        if !self.reason.is_empty() {
            text.push_str(&format!(": {}", self.reason));
        }
        if self.permitted {
            text.push_str(" (dropped as the job allows)");
        }
        for s in &self.states {
            text.push_str(&format!("\n    state {:?} {}", s.name, s.verdict.name()));
            if !s.reason.is_empty() {
                text.push_str(&format!(": {}", s.reason));
            }
        }
        text
    }
}

impl Verdicts {
    /// What a submission does with these verdicts: the uids whose state is dropped, or the reason it is
    /// refused — something incompatible, or state dropped without `allow_non_restored_state` (or the operator's
    /// `drop_state_on_change`). A refusal lists every operator whose state would not be restored, each with its
    /// states, verdicts and reasons (what `weir savepoint check` prints), so that a user who follows its advice
    /// knows everything the advice drops.
    pub fn outcome(&self, url: &str, allow_non_restored_state: bool) -> Result<Vec<String>, SavepointError> {
        let bad = |reason: String| SavepointError::Incompatible { url: url.to_string(), reason };
        if let Some(g) = &self.global {
            return Err(bad(g.clone()));
        }
        let not_restored: Vec<&OperatorVerdict> =
            self.operators.iter().filter(|v| matches!(v.verdict, Verdict::Dropped | Verdict::Incompatible)).collect();
        let incompatible = not_restored.iter().any(|v| v.verdict == Verdict::Incompatible);
        let refused_drop = |v: &&&OperatorVerdict| v.verdict == Verdict::Dropped && !v.permitted;
        let unpermitted = !allow_non_restored_state && not_restored.iter().any(|v| refused_drop(&v));
        if incompatible || unpermitted {
            let mut lines = Vec::new();
            let missing: Vec<&str> =
                not_restored.iter().filter(|v| refused_drop(v) && !v.in_job).map(|v| v.uid.as_str()).collect();
            if unpermitted && !missing.is_empty() {
                lines.push(format!(
                    "the savepoint holds state for operators the job does not have: {}",
                    missing.join(", ")
                ));
            }
            lines.push(format!("the state of {} operator(s) would not be restored:", not_restored.len()));
            lines.extend(not_restored.iter().map(|v| format!("  {}", v.describe())));
            if incompatible {
                lines.push(
                    "INCOMPATIBLE state is refused whatever the permissions: restore a version that reads it, or give \
                     the operator a new uid to start it afresh"
                        .into(),
                );
            }
            if unpermitted {
                lines.push(
                    "DROPPED state is lost by a restore: give such an operator of the job a new uid, set its \
                     drop_state_on_change: true, or restore with --allow-non-restored-state to drop all of the \
                     DROPPED state listed"
                        .into(),
                );
            }
            return Err(bad(lines.join("\n")));
        }
        let mut uids: Vec<String> =
            not_restored.iter().filter(|v| v.verdict == Verdict::Dropped).map(|v| v.uid.clone()).collect();
        uids.sort();
        Ok(uids)
    }

    /// Every state a restore with these verdicts drops, operator by operator, as the job reports it afterwards.
    pub fn dropped_states(&self) -> Vec<DroppedState> {
        let mut out = Vec::new();
        for v in self.operators.iter().filter(|v| v.verdict == Verdict::Dropped) {
            if v.states.is_empty() {
                out.push(DroppedState { uid: v.uid.clone(), state: String::new(), reason: v.reason.clone() });
            }
            for s in &v.states {
                let reason = match (s.reason.is_empty(), v.reason.is_empty()) {
                    (false, _) => s.reason.clone(),
                    (true, false) => v.reason.clone(),
                    (true, true) => "dropped with its operator".into(),
                };
                out.push(DroppedState { uid: v.uid.clone(), state: s.name.clone(), reason });
            }
        }
        out.sort_by(|a, b| (&a.uid, &a.state).cmp(&(&b.uid, &b.state)));
        out
    }
}

/// The verdicts state by state, when both the savepoint and the new version recorded each state's serializers
/// (`None` otherwise: [`state_change`] then compares whole signatures). Keys first: a changed key type is
/// incompatible (keys are never migrated). Then each state's serializers are resolved
/// (by `judge`: the formats' own rules, on a task manager), the weakest of its parts: as is or reconfigured is `RESTORED`, after
/// migration `MIGRATED`, incompatible in an evolvable format (Avro, Protobuf) `INCOMPATIBLE` with the format's
/// reason, any other change — another kind of state, a changed bincode type — `DROPPED`, and with it the
/// operator's other states (an operator's keyed state restores whole or not at all).
fn per_state(
    stored: &OperatorCheckpoint,
    op: &ResolvedOperator,
    judge: &dyn SerializerJudge,
) -> Option<(Verdict, String, Vec<StateVerdict>)> {
    use weir_common::state::serializer::{Resolution, SerializerSnapshot};
    let (old, new) = match (&stored.signature, &op.signature) {
        (Some(o), Some(n)) if !o.states.is_empty() && !n.states.is_empty() => (o, n),
        _ => return None,
    };
    let names = state_names(stored);
    if let (Some(ok), Some(nk)) = (&old.key, &new.key) {
        if let Resolution::Incompatible(why) = judge.resolve(ok, nk) {
            let reason = format!(
                "the key type changed ({why}); keys are never migrated, so its state cannot be restored: give the                  operator a new uid to start it afresh"
            );
            let states = names.iter().map(|n| StateVerdict::new(n, Verdict::Incompatible, "")).collect();
            return Some((Verdict::Incompatible, reason, states));
        }
    }
    let mut all: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    all.extend(old.states.iter().map(|s| s.state.as_str()));
    let mut states = Vec::new();
    for name in all {
        let was = old.states.iter().find(|s| s.state == name);
        let is = new.states.iter().find(|s| s.state == name);
        let v = match (was, is) {
            (_, None) => StateVerdict::new(
                name,
                Verdict::Restored,
                "the new version does not declare it: its rows are kept as they are, unread",
            ),
            (None, Some(_)) => {
                StateVerdict::new(name, Verdict::Restored, "the savepoint recorded no serializer for it")
            }
            (Some(w), Some(n)) if w.kind != n.kind => StateVerdict::new(
                name,
                Verdict::Dropped,
                format!("it was {} state and is now declared as {} state", w.kind, n.kind),
            ),
            (Some(w), Some(n)) => {
                // Map user keys and namespaces are part of the row key: they are never rewritten.
                let key_part =
                    |what: &str, wk: &Option<SerializerSnapshot>, nk: &Option<SerializerSnapshot>| match (wk, nk) {
                        (Some(wk), Some(nk)) => match judge.resolve(wk, nk) {
                            Resolution::AfterMigration => Resolution::Incompatible(format!(
                                "its {what} would need a migration from {} to {}, and keys are never migrated",
                                wk.describe(),
                                nk.describe()
                            )),
                            Resolution::Incompatible(why) => Resolution::Incompatible(format!("its {what}: {why}")),
                            k => k,
                        },
                        _ => Resolution::AsIs,
                    };
                let r = judge
                    .resolve(&w.value, &n.value)
                    .weakest(key_part("map keys", &w.user_key, &n.user_key))
                    .weakest(key_part("namespaces", &w.namespace, &n.namespace));
                let mut v = match r {
                    Resolution::AsIs => StateVerdict::new(name, Verdict::Restored, ""),
                    Resolution::Reconfigured => {
                        StateVerdict::new(name, Verdict::Restored, "read as is by the reconfigured serializer")
                    }
                    Resolution::AfterMigration => StateVerdict::new(
                        name,
                        Verdict::Migrated,
                        format!("from {} to {}", w.value.describe(), n.value.describe()),
                    ),
                    Resolution::Incompatible(why) if w.value.evolvable() && w.value.format == n.value.format => {
                        StateVerdict::new(name, Verdict::Incompatible, why)
                    }
                    Resolution::Incompatible(why) => StateVerdict::new(name, Verdict::Dropped, why),
                };
                if v.verdict >= Verdict::Migrated {
                    v.from = judge.schema_text(&w.value);
                    v.to = judge.schema_text(&n.value);
                }
                v
            }
        };
        states.push(v);
    }
    let fresh: Vec<StateVerdict> = new
        .states
        .iter()
        .filter(|n| !states.iter().any(|s| s.name == n.state))
        .map(|n| StateVerdict::new(&n.state, Verdict::New, "not in the savepoint: starts empty"))
        .collect();
    states.extend(fresh);
    let worst = states.iter().map(|s| s.verdict).max().unwrap_or(Verdict::Restored).max(Verdict::Restored);
    let first = states.iter().find(|s| s.verdict == worst).cloned();
    let reason = match (worst, &first) {
        (Verdict::Restored, _) | (_, None) => String::new(),
        (Verdict::Migrated, _) => {
            let migrated: Vec<&str> =
                states.iter().filter(|s| s.verdict == Verdict::Migrated).map(|s| s.name.as_str()).collect();
            format!("state {} migrated to the new serializers", migrated.join(", "))
        }
        (_, Some(s)) => format!("state {:?}: {}", s.name, s.reason),
    };
    if worst == Verdict::Dropped {
        let cause = first.map(|s| s.name).unwrap_or_default();
        for s in states.iter_mut().filter(|s| s.verdict != Verdict::Dropped && s.verdict != Verdict::New) {
            s.verdict = Verdict::Dropped;
            s.reason = format!("dropped with the operator's other state ({cause:?} changed)");
        }
    }
    Some((worst, reason, states))
}

/// Why an operator's stored state is not the state its new version declares, if it is not: another kind wrote
/// it, or (without per-state serializers, see [`per_state`]) the kind's state signature changed.
fn state_change(stored: &OperatorCheckpoint, op: &ResolvedOperator) -> Option<String> {
    if !stored.kind.is_empty() && stored.kind != op.kind {
        return Some(format!("its state was written by kind {:?} and the job runs kind {:?}", stored.kind, op.kind));
    }
    if let Some(change) = state_config_change(&stored.state_config, &op.state_config) {
        return Some(change);
    }
    match (&stored.signature, &op.signature) {
        (Some(old), Some(new)) if !old.states.is_empty() && !new.states.is_empty() => None,
        (Some(old), Some(new)) if old.fingerprint != new.fingerprint => Some(format!(
            "the state signature of kind {:?} changed from {} to {}:\n  was: {}\n  now: {}",
            op.kind,
            old.fingerprint,
            new.fingerprint,
            old.text.replace('\n', "\n       "),
            new.text.replace('\n', "\n       ")
        )),
        _ => None,
    }
}

/// Which config fields its state depends on changed between the savepoint (`stored`) and the job (`now`), said as
/// a reason, if any did; a savepoint that recorded none (an earlier version's) has nothing to compare.
fn state_config_change(stored: &BTreeMap<String, String>, now: &BTreeMap<String, String>) -> Option<String> {
    if stored.is_empty() {
        return None;
    }
    let unset = String::from("unset");
    let changed: Vec<String> = stored
        .keys()
        .chain(now.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter_map(|field| {
            let (was, is) = (stored.get(field).unwrap_or(&unset), now.get(field).unwrap_or(&unset));
            (was != is).then(|| format!("{field} changed from {was:?} to {is:?}"))
        })
        .collect();
    (!changed.is_empty()).then(|| {
        format!(
            "its state was written under another config: {}; the stored state holds what the old value made",
            changed.join(", ")
        )
    })
}

/// The max parallelism a job restored from `meta` must have: the savepoint's when the spec left it unset.
pub fn adopt_max_parallelism(explicit: Option<u32>, meta: &CheckpointMetadata) -> u32 {
    explicit.unwrap_or(meta.max_parallelism)
}

/// The summary `weir savepoint inspect` prints.
pub fn summarize(sp: &LoadedSavepoint) -> pb::InspectSavepointResponse {
    let meta = &sp.metadata;
    let operators = meta
        .operators
        .iter()
        .map(|(uid, op)| {
            let mut states: std::collections::BTreeMap<String, pb::StateSummary> = Default::default();
            let mut subtasks = Vec::new();
            for s in &op.subtasks {
                let keyed_bytes: u64 = s.keyed.iter().flat_map(|k| k.files.iter()).map(|f| f.size).sum();
                let (mut elements, mut bytes) = (0, 0);
                for m in s.operator_state.iter().flat_map(|h| h.states.iter()) {
                    elements += m.elements;
                    bytes += m.bytes;
                    let kind = match m.mode {
                        DistributionMode::SplitDistribute => "operator-list",
                        DistributionMode::Union => "union-list",
                        DistributionMode::Broadcast => "broadcast",
                    };
                    let e = states.entry(m.name.clone()).or_insert_with(|| pb::StateSummary {
                        name: m.name.clone(),
                        kind: kind.to_string(),
                        bytes: 0,
                        elements: Some(0),
                        ttl: String::new(),
                    });
                    e.bytes += m.bytes;
                    // A broadcast state is one copy per subtask; its elements are counted once.
                    if m.mode != DistributionMode::Broadcast || e.elements == Some(0) {
                        *e.elements.get_or_insert(0) += m.elements;
                    }
                }
                for k in s.keyed.iter() {
                    // Snapshots that do not list their states (taken before they did) show as one entry.
                    if k.states.is_empty() {
                        let e = states.entry("(keyed)".to_string()).or_insert_with(|| pb::StateSummary {
                            name: "(keyed)".to_string(),
                            kind: format!("keyed ({})", k.backend),
                            bytes: 0,
                            elements: None,
                            ttl: String::new(),
                        });
                        e.bytes += keyed_bytes;
                    }
                    for st in &k.states {
                        let e = states.entry(st.name.clone()).or_insert_with(|| pb::StateSummary {
                            name: st.name.clone(),
                            kind: st.kind.clone(),
                            bytes: 0,
                            elements: None,
                            ttl: st.ttl_ms.map(|t| format!("{t} ms")).unwrap_or_default(),
                        });
                        e.bytes += st.bytes;
                        // Timer states count their timers.
                        if let Some(n) = st.entries {
                            *e.elements.get_or_insert(0) += n;
                        }
                    }
                }
                subtasks.push(pb::SubtaskStateSummary {
                    subtask: s.subtask.0,
                    key_group_start: s.keyed.as_ref().map(|k| k.key_group_range.start),
                    key_group_end: s.keyed.as_ref().map(|k| k.key_group_range.end),
                    keyed_bytes,
                    backend: s.keyed.as_ref().map_or(0, |k| k.backend as i32),
                    operator_state_elements: elements,
                    operator_state_bytes: bytes,
                });
            }
            pb::OperatorStateSummary {
                uid: uid.clone(),
                kind: op.kind.clone(),
                parallelism: op.parallelism,
                max_parallelism: meta.max_parallelism,
                states: states.into_values().collect(),
                subtasks,
            }
        })
        .collect();
    pb::InspectSavepointResponse {
        url: sp.url.clone(),
        job_id: meta.job_id.to_string(),
        checkpoint_id: meta.checkpoint_id.0,
        max_parallelism: meta.max_parallelism,
        format: meta.savepoint.unwrap_or(SavepointFormat::Checkpoint) as i32,
        operators,
        timestamp_ms: meta.timestamp_ms,
    }
}

/// Deletes a savepoint's directory; refuses anything that is not a savepoint (a retained checkpoint belongs
/// to its job). Returns how many files were deleted.
pub async fn dispose(url: &str, opts: &StoreOptions) -> Result<u64, SavepointError> {
    let sp = load(url, opts).await?;
    if sp.metadata.savepoint.is_none() {
        return Err(SavepointError::NotASavepoint {
            url: sp.url,
            reason: "it is a checkpoint of a job, not a savepoint; its job deletes it".into(),
        });
    }
    delete_files(&sp.url, opts).await.map_err(|source| SavepointError::Unavailable { url: sp.url.clone(), source })
}

/// Another job, as [`ownership_conflict`] sees it.
#[derive(Clone, Debug)]
pub struct OtherJob {
    /// Its id.
    pub id: String,
    /// It has not ended.
    pub running: bool,
    /// The directory it still restores from, and how.
    pub restoring_from: Option<(String, RestoreMode)>,
}

/// Why restoring the savepoint or retained checkpoint at `url` in `mode` would take files from under another
/// job, if it would: a job restoring in claim mode deletes what it restored from once its own checkpoints
/// subsume it, so nobody else may restore from that while it runs; and a running job's own checkpoints are
/// its to delete, so they cannot be claimed (`store` is the job manager's checkpoint store URL).
pub fn ownership_conflict(url: &str, mode: RestoreMode, store: &str, others: &[OtherJob]) -> Option<String> {
    let dir = dir_of(url);
    for other in others.iter().filter(|o| o.running) {
        match &other.restoring_from {
            Some((from, RestoreMode::Claim)) if dir_of(from) == dir => {
                return Some(format!(
                    "job {} restores from it in claim mode and owns it: it deletes it once its own checkpoints \
                     subsume it; restore from a checkpoint or savepoint of job {} instead",
                    other.id, other.id
                ))
            }
            Some((from, RestoreMode::NoClaim)) if mode == RestoreMode::Claim && dir_of(from) == dir => {
                return Some(format!(
                    "job {} still restores from it, so it cannot be claimed: restore it in no-claim mode",
                    other.id
                ))
            }
            _ => {}
        }
        let owned = format!("{}/{}/", store.trim_end_matches('/'), other.id);
        if mode == RestoreMode::Claim && format!("{dir}/").starts_with(&owned) {
            return Some(format!(
                "it is a checkpoint of job {}, which is still running and owns it: restore it in no-claim mode, or \
                 stop job {} first",
                other.id, other.id
            ));
        }
    }
    None
}

/// Deletes what a job restored in claim mode took ownership of, once its own checkpoints subsumed it: a
/// savepoint's whole directory, or a retained checkpoint's directory and every file it references in its job's
/// `shared/` and `taskowned/` folders (as Flink's claim mode does: restoring another checkpoint of that job is
/// unsafe afterwards). Returns how many files were deleted.
pub async fn delete_claimed(url: &str, opts: &StoreOptions) -> Result<u64, SavepointError> {
    let sp = load(url, opts).await?;
    let unavailable = |source| SavepointError::Unavailable { url: sp.url.clone(), source };
    if sp.metadata.savepoint.is_some() {
        return delete_files(&sp.url, opts).await.map_err(unavailable);
    }
    let root = Store::open_existing(&sp.root, opts).map_err(unavailable)?;
    let mut deleted = 0u64;
    for f in sp.metadata.files() {
        root.delete(&f.path).await.map_err(unavailable)?;
        deleted += 1;
    }
    Ok(deleted + delete_files(&sp.url, opts).await.map_err(unavailable)?)
}

/// Deletes every file under a savepoint's directory (a disposed savepoint, or what a failed one wrote), its
/// `_metadata` last, so that a half-deleted savepoint is still recognisable and can be disposed again. Returns
/// how many files were deleted.
pub async fn delete_files(url: &str, opts: &StoreOptions) -> Result<u64, StoreError> {
    let local = url.strip_prefix("file://");
    if local.is_some_and(|dir| !std::path::Path::new(dir).exists()) {
        return Ok(0);
    }
    let store = Store::open_existing(url, opts)?;
    let files = store.list("").await?;
    for f in files.iter().filter(|f| f.as_str() != paths::METADATA_FILE) {
        store.delete(f).await?;
    }
    store.delete(paths::METADATA_FILE).await?;
    // The local store leaves the (now empty) directory itself behind.
    if let Some(dir) = local {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(files.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_config_field_that_shapes_state_is_named() {
        let config = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let was = config(&[("aggregates", "COUNT(*) AS n"), ("key (input)", "a")]);
        assert_eq!(state_config_change(&was, &was), None);
        let more = config(&[("aggregates", "COUNT(*) AS n, SUM(x) AS s"), ("key (input)", "a")]);
        let why = state_config_change(&was, &more).unwrap();
        assert!(why.contains(r#"aggregates changed from "COUNT(*) AS n" to "COUNT(*) AS n, SUM(x) AS s""#), "{why}");
        assert!(!why.contains("key"), "{why}");
        let rekeyed = config(&[("aggregates", "COUNT(*) AS n"), ("key (input)", "b")]);
        assert!(state_config_change(&was, &rekeyed).unwrap().contains(r#"key (input) changed from "a" to "b""#));
        let unkeyed = config(&[("aggregates", "COUNT(*) AS n")]);
        assert!(state_config_change(&was, &unkeyed).unwrap().contains(r#"from "a" to "unset""#));
        assert_eq!(state_config_change(&BTreeMap::new(), &more), None, "an earlier version's savepoint recorded none");
    }
    use weir_common::state::serializer::{Resolution, SerializerSnapshot};

    /// Serializer rules as a task manager's would answer for these tests' schemas: an equal schema reads as is,
    /// a changed Avro one after a migration, any other change not at all (the formats' real rules are tested
    /// with the state backend, and end to end with task managers).
    struct Rules;

    impl SerializerJudge for Rules {
        fn resolve(&self, written: &SerializerSnapshot, reading: &SerializerSnapshot) -> Resolution {
            match (written, reading) {
                (w, r) if w == r => Resolution::AsIs,
                (w, r) if w.format == r.format && w.evolvable() => Resolution::AfterMigration,
                (w, r) => Resolution::Incompatible(format!("{} changed to {}", w.describe(), r.describe())),
            }
        }

        fn schema_text(&self, snapshot: &SerializerSnapshot) -> String {
            snapshot.schema.clone()
        }
    }

    /// What a submission of `job` from `sp` does: the verdicts and their outcome.
    fn check_against_job(
        sp: &LoadedSavepoint,
        job: &ResolvedJob,
        explicit_max_parallelism: Option<u32>,
        allow_non_restored_state: bool,
        union_fanout_limit: u64,
    ) -> Result<Vec<String>, SavepointError> {
        verdicts(sp, job, explicit_max_parallelism, union_fanout_limit, &Rules)
            .outcome(&sp.url, allow_non_restored_state)
    }
    use weir_common::checkpoint::{
        FileHandle, OperatorCheckpoint, OperatorStateHandle, OperatorSubtaskState, SavepointFormat, StateMetaInfo,
    };
    use weir_common::ids::{CheckpointId, JobId, SubtaskIndex};

    fn savepoint(max_parallelism: u32, union_bytes: u64) -> LoadedSavepoint {
        let job = crate::job::descriptors::tests::demo_job();
        let mut operators = std::collections::BTreeMap::new();
        for op in &job.operators {
            let subtasks = (0..op.parallelism)
                .map(|s| OperatorSubtaskState {
                    subtask: SubtaskIndex(s),
                    keyed: None,
                    operator_state: Some(OperatorStateHandle {
                        file: FileHandle { path: format!("{}/{s}/opstate", op.uid), size: union_bytes },
                        states: vec![StateMetaInfo::inline("u", DistributionMode::Union, vec![0], union_bytes)],
                    }),
                    end_of_input: false,
                    watermark: None,
                })
                .collect();
            operators.insert(
                op.uid.clone(),
                OperatorCheckpoint {
                    kind: op.kind.clone(),
                    parallelism: op.parallelism,
                    subtasks,
                    signature: None,
                    state_config: Default::default(),
                },
            );
        }
        LoadedSavepoint {
            url: "file:///sp".into(),
            root: "file:///sp".into(),
            metadata: CheckpointMetadata {
                format_version: weir_common::checkpoint::METADATA_FORMAT_VERSION,
                job_id: JobId("j".into()),
                checkpoint_id: CheckpointId(3),
                timestamp_ms: 1,
                max_parallelism,
                is_final: false,
                operators,
                savepoint: Some(SavepointFormat::Native),
            },
        }
    }

    #[test]
    fn a_savepoint_is_checked_against_the_job_before_deploying() {
        let job = crate::job::descriptors::tests::demo_job();
        let sp = savepoint(128, 10);
        assert_eq!(check_against_job(&sp, &job, None, false, u64::MAX).unwrap(), Vec::<String>::new());
        let e = check_against_job(&sp, &job, Some(256), false, u64::MAX).unwrap_err().to_string();
        assert!(e.contains("max_parallelism 128 and the job sets 256"), "{e}");
        assert_eq!(adopt_max_parallelism(None, &sp.metadata), 128);

        let mut extra = sp.clone();
        let stored = extra.metadata.operators["counts"].clone();
        extra.metadata.operators.insert("gone".into(), stored);
        let e = check_against_job(&extra, &job, None, false, u64::MAX).unwrap_err().to_string();
        assert!(e.contains("operators the job does not have: gone") && e.contains("--allow-non-restored-state"), "{e}");
        assert_eq!(check_against_job(&extra, &job, None, true, u64::MAX).unwrap(), vec!["gone".to_string()]);

        // Union state: 2 subtasks x 1000 bytes, read by each of the 2 new subtasks = 4000 bytes.
        let big = savepoint(128, 1000);
        assert!(check_against_job(&big, &job, None, false, 4000).is_ok());
        let e = check_against_job(&big, &job, None, false, 3999).unwrap_err().to_string();
        assert!(e.contains("union-state fan-out limit of 3999 bytes") && e.contains("4000 bytes in all"), "{e}");
    }

    #[test]
    fn what_another_job_owns_is_not_restored_from_behind_its_back() {
        let store = "file:///cp";
        let job = |id: &str, running, from: Option<(&str, RestoreMode)>| OtherJob {
            id: id.into(),
            running,
            restoring_from: from.map(|(u, m)| (u.to_string(), m)),
        };
        let chk = "file:///cp/aaaa/chk-7";
        // A running job's own checkpoint: no-claim is fine, claim is refused; once it ended, both are fine.
        let owner = [job("aaaa", true, None)];
        assert!(ownership_conflict(chk, RestoreMode::NoClaim, store, &owner).is_none());
        let e = ownership_conflict(chk, RestoreMode::Claim, store, &owner).unwrap();
        assert!(e.contains("checkpoint of job aaaa") && e.contains("no-claim"), "{e}");
        assert!(ownership_conflict(chk, RestoreMode::Claim, store, &[job("aaaa", false, None)]).is_none());
        // Another job claimed it: nobody restores from it, in either mode (a trailing /_metadata is the same).
        let claimer = [job("bbbb", true, Some((chk, RestoreMode::Claim)))];
        for mode in [RestoreMode::NoClaim, RestoreMode::Claim] {
            let e = ownership_conflict(&format!("{chk}/_metadata"), mode, store, &claimer).unwrap();
            assert!(e.contains("job bbbb restores from it in claim mode"), "{e}");
        }
        // Another job restores from it without claiming: no-claim is fine, claim is refused.
        let reader = [job("cccc", true, Some((chk, RestoreMode::NoClaim)))];
        assert!(ownership_conflict(chk, RestoreMode::NoClaim, store, &reader).is_none());
        assert!(ownership_conflict(chk, RestoreMode::Claim, store, &reader).unwrap().contains("job cccc"));
        // A job id that merely starts like the owner's is another job.
        assert!(ownership_conflict("file:///cp/aaaab/chk-1", RestoreMode::Claim, store, &owner).is_none());
    }

    #[test]
    fn verdicts_say_what_happens_to_each_operator() {
        let job = crate::job::descriptors::tests::demo_job();
        let mut sp = savepoint(128, 10);
        let counts = sp.metadata.operators.remove("counts").unwrap();
        sp.metadata.operators.insert("gone".into(), counts);
        let v = verdicts(&sp, &job, None, u64::MAX, &Rules).operators;
        let of = |uid: &str| v.iter().find(|o| o.uid == uid).unwrap();
        assert_eq!(of("counts").verdict, Verdict::New);
        assert_eq!((of("gone").verdict, of("gone").in_job), (Verdict::Dropped, false));
        assert_eq!(of("gone").reason, "the job has no operator with this uid");
        assert!(v.iter().filter(|o| o.uid != "counts" && o.uid != "gone").all(|o| o.verdict == Verdict::Restored));
        // Another max parallelism: every stored operator is incompatible, for the same reason.
        let v = verdicts(&sp, &job, Some(256), u64::MAX, &Rules).operators;
        assert!(v.iter().filter(|o| o.in_job && o.verdict != Verdict::New).all(|o| o.verdict == Verdict::Incompatible));
        assert_eq!(Verdict::Incompatible.name(), "INCOMPATIBLE");
    }

    #[test]
    fn a_refusal_lists_every_operator_whose_state_would_not_be_restored() {
        let job = crate::job::descriptors::tests::demo_job();
        let mut sp = savepoint(128, 10);
        sp.metadata.operators.get_mut("counts").unwrap().kind = "distinct-values".into();
        let stored = sp.metadata.operators["counts"].clone();
        sp.metadata.operators.insert("gone".into(), stored);
        let v = verdicts(&sp, &job, None, u64::MAX, &Rules);
        let e = v.outcome(&sp.url, false).unwrap_err().to_string();
        // Both reasons, not only the first: a user who follows the advice knows all it drops.
        assert!(e.contains("operators the job does not have: gone"), "{e}");
        assert!(e.contains("the state of 2 operator(s) would not be restored"), "{e}");
        assert!(e.contains("operator \"counts\" DROPPED: its state was written by kind \"distinct-values\""), "{e}");
        assert!(e.contains("operator \"gone\" DROPPED: the job has no operator with this uid"), "{e}");
        let states: Vec<&str> = e.lines().filter(|l| l.trim_start().starts_with("state ")).collect();
        assert_eq!(states.len(), 2 * state_names(&sp.metadata.operators["counts"]).len(), "{e}");
        assert!(e.contains("--allow-non-restored-state"), "{e}");
        // Allowed: both operators' states are reported dropped, each with its reason.
        assert_eq!(v.outcome(&sp.url, true).unwrap(), vec!["counts".to_string(), "gone".to_string()]);
        let dropped = v.dropped_states();
        let uids: BTreeSet<&str> = dropped.iter().map(|d| d.uid.as_str()).collect();
        assert_eq!(uids, BTreeSet::from(["counts", "gone"]));
        assert!(dropped.iter().all(|d| !d.reason.is_empty()), "{dropped:?}");
        assert!(dropped.iter().any(|d| d.uid == "gone" && d.reason.contains("no operator with this uid")));
    }

    #[test]
    fn state_of_another_kind_or_signature_is_refused_or_dropped_with_permission() {
        use weir_common::job::kind::KindSignature;
        let sig =
            |f: &str, t: &str| Some(KindSignature { fingerprint: f.into(), text: t.into(), key: None, states: vec![] });
        let job = crate::job::descriptors::tests::demo_job();
        let mut sp = savepoint(128, 10);
        sp.metadata.operators.get_mut("counts").unwrap().kind = "distinct-values".into();
        let e = check_against_job(&sp, &job, None, false, u64::MAX).unwrap_err().to_string();
        assert!(
            e.contains(
                "operator \"counts\" DROPPED: its state was written by kind \"distinct-values\" and the job runs kind \
                        \"keyed-count\""
            ) && e.contains("--allow-non-restored-state"),
            "{e}"
        );
        assert_eq!(check_against_job(&sp, &job, None, true, u64::MAX).unwrap(), vec!["counts".to_string()]);
        // The operator may say so itself.
        let mut permissive = job.clone();
        permissive.operators.iter_mut().find(|o| o.uid == "counts").unwrap().drop_state_on_change = true;
        assert_eq!(check_against_job(&sp, &permissive, None, false, u64::MAX).unwrap(), vec!["counts".to_string()]);

        // The same kind with another state signature.
        let mut job = job;
        let counts = job.operators.iter_mut().find(|o| o.uid == "counts").unwrap();
        counts.signature = sig("00000000000000bb", "key: seq<u8>\nvalue \"count\": u64");
        let mut sp = savepoint(128, 10);
        sp.metadata.operators.get_mut("counts").unwrap().signature =
            sig("00000000000000aa", "key: seq<u8>\nvalue \"count\": u32");
        let e = check_against_job(&sp, &job, None, false, u64::MAX).unwrap_err().to_string();
        assert!(
            e.contains("changed from 00000000000000aa to 00000000000000bb") && e.contains("value \"count\": u32"),
            "{e}"
        );
        assert_eq!(check_against_job(&sp, &job, None, true, u64::MAX).unwrap(), vec!["counts".to_string()]);
        // Equal signatures, or one side without a signature (an earlier version): restored.
        sp.metadata.operators.get_mut("counts").unwrap().signature = sig("00000000000000bb", "");
        assert!(check_against_job(&sp, &job, None, false, u64::MAX).unwrap().is_empty());
        sp.metadata.operators.get_mut("counts").unwrap().signature = None;
        assert!(check_against_job(&sp, &job, None, false, u64::MAX).unwrap().is_empty());
    }

    #[test]
    fn the_summary_counts_elements_per_state() {
        let s = summarize(&savepoint(128, 10));
        assert_eq!(s.format(), SavepointFormat::Native);
        let counts = s.operators.iter().find(|o| o.uid == "counts").unwrap();
        assert_eq!(counts.parallelism, 2);
        assert_eq!(counts.states[0].elements, Some(2));
        assert_eq!(counts.states[0].kind, "union-list");
    }

    /// Per state: as is, migrated (Avro), dropped (another state kind, a changed plain type: with the operator's
    /// other states), refused (a changed key, map-key or namespace type), new.
    #[test]
    fn states_are_judged_one_by_one_from_their_serializers() {
        use weir_common::job::kind::KindSignature;
        use weir_common::state::serializer::{SerializerSnapshot as S, StateSerializers};
        let avro = |fields: &str| S {
            format: weir_common::state::serializer::FORMAT_AVRO.into(),
            version: 1,
            root: "P".into(),
            schema: format!(r#"{{"type":"record","name":"P","fields":[{fields}]}}"#),
        };
        let v1 = avro(r#"{"name":"n","type":"long"}"#);
        let v2 = avro(r#"{"name":"n","type":"long"},{"name":"w","type":"long","default":1}"#);
        let state = |name: &str, kind: &str, value: S, ns: Option<S>| StateSerializers {
            state: name.into(),
            kind: kind.into(),
            value,
            user_key: None,
            namespace: ns,
        };
        let sig = |key: &str, states: Vec<StateSerializers>| KindSignature {
            fingerprint: "f".into(),
            text: String::new(),
            key: Some(S::signature(key)),
            states,
        };
        let judge = |old: KindSignature, new: KindSignature| {
            let mut job = crate::job::descriptors::tests::demo_job();
            let mut sp = savepoint(128, 10);
            sp.metadata.operators.get_mut("counts").unwrap().signature = Some(old);
            job.operators.iter_mut().find(|o| o.uid == "counts").unwrap().signature = Some(new);
            let v = verdicts(&sp, &job, None, u64::MAX, &Rules);
            v.operators.into_iter().find(|o| o.uid == "counts").unwrap()
        };
        let by_name = |v: &OperatorVerdict, n: &str| v.states.iter().find(|s| s.name == n).cloned().unwrap();

        let old =
            sig("u64", vec![state("p", "value", v1.clone(), None), state("c", "value", S::signature("u64"), None)]);
        let migrated = judge(
            old.clone(),
            sig("u64", vec![state("p", "value", v2.clone(), None), state("c", "value", S::signature("u64"), None)]),
        );
        assert_eq!(migrated.verdict, Verdict::Migrated, "{migrated:?}");
        let p = by_name(&migrated, "p");
        assert!(p.reason.starts_with("from avro P") && p.from.contains("\"n\"") && p.to.contains("\"w\""), "{p:?}");
        assert_eq!(by_name(&migrated, "c").verdict, Verdict::Restored);

        let plus_new = judge(
            old.clone(),
            sig(
                "u64",
                vec![
                    state("p", "value", v1.clone(), None),
                    state("c", "value", S::signature("u64"), None),
                    state("fresh", "list", S::signature("u64"), None),
                ],
            ),
        );
        assert_eq!(plus_new.verdict, Verdict::Restored, "{plus_new:?}");
        assert_eq!(by_name(&plus_new, "fresh").verdict, Verdict::New);

        let dropped = judge(
            old.clone(),
            sig("u64", vec![state("p", "value", v1.clone(), None), state("c", "list", S::signature("u64"), None)]),
        );
        assert_eq!(dropped.verdict, Verdict::Dropped, "{dropped:?}");
        assert!(by_name(&dropped, "c").reason.contains("was value state and is now declared as list"));
        assert!(by_name(&dropped, "p").reason.contains("dropped with the operator's other state"), "{dropped:?}");

        let key = judge(old.clone(), sig("string", old.states.clone()));
        assert_eq!(key.verdict, Verdict::Incompatible);
        assert!(key.reason.contains("key type changed"), "{key:?}");

        let windows = |ns: &str| {
            sig(
                "u64",
                vec![
                    state("p", "value", v1.clone(), None),
                    state("c", "value", S::signature("u64"), Some(S::signature(ns))),
                ],
            )
        };
        let ns = judge(windows("u64"), windows("string"));
        assert_eq!(ns.verdict, Verdict::Dropped, "a plain namespace type that changed: {ns:?}");
        assert!(by_name(&ns, "c").reason.contains("its namespaces"), "{ns:?}");
        let evolving = |ns: S| sig("u64", vec![state("p", "value", v1.clone(), Some(ns))]);
        let ns = judge(evolving(v1.clone()), evolving(v2.clone()));
        assert_eq!(ns.verdict, Verdict::Incompatible, "an Avro namespace would need a migration: {ns:?}");
        assert!(ns.reason.contains("namespaces would need a migration"), "{ns:?}");

        // Timer services are states (what `StateSignature::timers` declares): listed, and a changed namespace
        // type is refused with the operator's other state.
        let timers = |ns: &str| {
            let t = |name: &str| state(name, "timers", S::signature("()"), Some(S::signature(ns)));
            sig(
                "u64",
                vec![state("c", "value", S::signature("u64"), None), t("_timers.event"), t("_timers.processing")],
            )
        };
        let same = judge(timers("u8"), timers("u8"));
        assert_eq!(same.verdict, Verdict::Restored, "{same:?}");
        assert_eq!(by_name(&same, "_timers.event").verdict, Verdict::Restored);
        let changed = judge(timers("u8"), timers("u64"));
        assert_eq!(changed.verdict, Verdict::Dropped, "{changed:?}");
        assert!(by_name(&changed, "_timers.event").reason.contains("its namespaces"), "{changed:?}");
        assert!(by_name(&changed, "c").reason.contains("dropped with the operator's other state"), "{changed:?}");
    }
}
