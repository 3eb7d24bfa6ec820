//! `state-kinds`: a keyed operator that keeps every kind of state, so that a test can check each one's content
//! after rescaling (which redistributes each kind differently).
//!
//! # State
//!
//! Keyed, per key, after its `n`-th record: `count` (`ValueState<u64>`, n), `seen` (`ListState<u64>`,
//! 1..=n), `squares` (`MapState<u64, u64>`, i → i² for i in 1..=n), `sum` (`ReducingState<u64>`, 1 + … + n)
//! and `max` (`AggregatingState`, n).
//!
//! Operator state, per subtask: `tokens` (operator list state: subtask `i` of the first run creates
//! `t-<i>-0` … `t-<i>-9`; rescaling deals them out round-robin, so each exists exactly once), `members` (union
//! list state: `m-<i>` from each subtask of the first run; every subtask gets every element on restore and
//! keeps one of each) and `config` (broadcast state: `rule` → `r1`, the same copy everywhere).
//!
//! # Output
//!
//! At end of input, per key: `(key, "n|list length|list sum|map entries|map value sum|sum|max")`; per
//! token: `("token", token)`; per subtask: `("members", sorted members joined by ",")` and
//! `("config", "rule=<value>")`. Input values are ignored.

use arrow_array::RecordBatch;
use std::collections::{BTreeMap, BTreeSet};
use weir_common::job::kind::{KindInfo, Role, StateClass};
use weir_state::{AggregateFunction, AggregatingState, ListState, MapState, ReducingState, ValueState};
use weir_taskmanager::api::operator::{
    Collector, InitContext, Operator, OperatorError, ProcessContext, SnapshotContext,
};
use weir_taskmanager::api::record::{Record, Value};

/// The kind's name in the registry.
pub const KIND: &str = "state-kinds";
/// Tokens each subtask of the first run creates.
pub const TOKENS_PER_SUBTASK: u32 = 10;

/// What the job manager learns about `state-kinds` when a task manager with it registers.
pub fn kind_info() -> KindInfo {
    KindInfo::new(KIND, Role::Operator, true, env!("CARGO_PKG_VERSION"))
        .with_states(&[
            ("count", StateClass::Value, "u64"),
            ("seen", StateClass::List, "u64"),
            ("squares", StateClass::Map, "u64 -> u64"),
            ("sum", StateClass::Reducing, "u64"),
            ("max", StateClass::Aggregating, "u64"),
            ("tokens", StateClass::OperatorList, "string"),
            ("members", StateClass::Union, "string"),
            ("config", StateClass::Broadcast, "string -> string"),
        ])
        .with_output(weir_common::job::schema::OutputSchema::Columns(weir_common::job::schema::key_value("binary")))
}

/// The maximum of the values added.
struct Max;

impl AggregateFunction<u64, u64, u64> for Max {
    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, value: u64, acc: u64) -> u64 {
        acc.max(value)
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
}

/// The keyed states.
struct Keyed {
    count: ValueState<u64>,
    seen: ListState<u64>,
    squares: MapState<u64, u64>,
    sum: ReducingState<u64>,
    max: AggregatingState<u64, u64, u64>,
}

/// The operator; see the module docs.
#[derive(Default)]
pub struct StateKinds {
    keyed: Option<Keyed>,
    tokens: Vec<Vec<u8>>,
    members: BTreeSet<Vec<u8>>,
    config: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl StateKinds {
    /// A fresh operator.
    pub fn new() -> Self {
        Self::default()
    }

    fn keyed(&mut self) -> Result<&mut Keyed, OperatorError> {
        self.keyed.as_mut().ok_or_else(|| OperatorError::Misuse(format!("{KIND} used before initialize_state")))
    }
}

fn text(b: &[u8]) -> Value {
    Value::Bytes(b.to_vec())
}

impl Operator for StateKinds {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        let i = ctx.info.subtask.0;
        let restored = ctx.restored;
        let store = &mut *ctx.operator_state;
        if !restored {
            let tokens = store.list_state("tokens")?;
            tokens.extend((0..TOKENS_PER_SUBTASK).map(|j| format!("t-{i}-{j}").into_bytes()));
            store.union_list_state("members")?.push(format!("m-{i}").into_bytes());
            store.broadcast_state("config")?.insert(b"rule".to_vec(), b"r1".to_vec());
        }
        self.tokens = store.list_state("tokens")?.clone();
        // Union state arrives from every old subtask: one of each is kept.
        self.members = store.union_list_state("members")?.iter().cloned().collect();
        self.config = store.broadcast_state("config")?.clone();
        let backend = ctx
            .keyed
            .as_mut()
            .ok_or_else(|| OperatorError::Misuse(format!("{KIND} needs keyed state (declare the kind keyed)")))?;
        let b = &mut **backend;
        self.keyed = Some(Keyed {
            count: ValueState::register(b, "count")?,
            seen: ListState::register(b, "seen")?,
            squares: MapState::register(b, "squares")?,
            sum: ReducingState::register(b, "sum", |a: u64, c: u64| a + c)?,
            max: AggregatingState::register(b, "max", Max)?,
        });
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: &RecordBatch,
        ctx: &mut ProcessContext<'_>,
        _: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let records = weir_taskmanager::api::batch::records(batch)?;
        let backend = ctx.keyed()?;
        let k = self.keyed()?;
        for r in records {
            backend.set_current_key(&r.key);
            let n = k.count.value(backend)?.unwrap_or(0) + 1;
            k.count.update(backend, &n)?;
            k.seen.add(backend, &n)?;
            k.squares.put(backend, &n, &(n * n))?;
            k.sum.add(backend, n)?;
            k.max.add(backend, n)?;
        }
        Ok(())
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext<'_>) -> Result<(), OperatorError> {
        let store = &mut *ctx.operator_state;
        *store.list_state("tokens")? = self.tokens.clone();
        *store.union_list_state("members")? = self.members.iter().cloned().collect();
        *store.broadcast_state("config")? = self.config.clone();
        Ok(())
    }

    fn end_of_input(&mut self, ctx: &mut ProcessContext<'_>, out: &mut Collector<'_>) -> Result<(), OperatorError> {
        let backend = ctx.keyed()?;
        let k =
            self.keyed.as_mut().ok_or_else(|| OperatorError::Misuse(format!("{KIND} used before initialize_state")))?;
        let mut keys = Vec::new();
        k.count.for_each(backend, |key, _| {
            keys.push(key.to_vec());
            Ok(())
        })?;
        for key in keys {
            backend.set_current_key(&key);
            let n = k.count.value(backend)?.unwrap_or(0);
            let seen = k.seen.get(backend)?;
            let squares = k.squares.entries(backend)?;
            let line = format!(
                "{n}|{}|{}|{}|{}|{}|{}",
                seen.len(),
                seen.iter().sum::<u64>(),
                squares.len(),
                squares.iter().map(|(_, v)| v).sum::<u64>(),
                k.sum.get(backend)?.unwrap_or(0),
                k.max.get(backend)?.unwrap_or(0)
            );
            out.emit(Record { key: key.as_slice().into(), value: Value::Bytes(line.into_bytes()), timestamp: None })?;
        }
        for t in &self.tokens {
            out.emit(Record { key: b"token".as_slice().into(), value: text(t), timestamp: None })?;
        }
        let members: Vec<String> = self.members.iter().map(|m| String::from_utf8_lossy(m).into_owned()).collect();
        out.emit(Record {
            key: b"members".as_slice().into(),
            value: Value::Bytes(members.join(",").into_bytes()),
            timestamp: None,
        })?;
        let rule =
            self.config.get(b"rule".as_slice()).map(|v| String::from_utf8_lossy(v).into_owned()).unwrap_or_default();
        out.emit(Record {
            key: b"config".as_slice().into(),
            value: Value::Bytes(format!("rule={rule}").into_bytes()),
            timestamp: None,
        })?;
        Ok(())
    }
}
