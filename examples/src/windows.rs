//! Window kinds a user writes on Weir's window library (`weir_taskmanager::window::operator`), in two versions
//! whose window state types differ, for the upgrade-safety tests. Each emits `(key, window_start, window_end,
//! count)` rows as `window-aggregate` does and takes its `window:` config (one shape per kind):
//!
//! | kind | windows | window function | state (v1) | state (v2) | restore of a v1 savepoint into v2 |
//! |---|---|---|---|---|---|
//! | `window-profiles` | tumbling | incremental: an accumulator per window | `Avro<Profile>` `{count, label}` | `Avro<Profile>` `{count, weight = 1}`, v2 adds `weight` per record | `MIGRATED` |
//! | `window-visits` | session | process-window: every element of the session | `Protobuf<Session>` elements `{1: count, 2: string label}` | `{1: count, 2: double ratio}` | `INCOMPATIBLE` |

use crate::upgrades::Tally;
use arrow_array::builder::{ArrayBuilder, BinaryBuilder, Int64Builder, TimestampMillisecondBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use std::sync::Arc;
use weir_common::job::kind::{KindInfo, Role, StateClass};
use weir_state::signature::TypeSignature;
use weir_state::StateCodec;
use weir_taskmanager::api::operator::{Collector, OperatorError};
use weir_taskmanager::api::registry::{signed, Instance, InvalidConfig, Registry};
use weir_taskmanager::window::assign::{TimeWindow, WindowKind};
use weir_taskmanager::window::config::{WindowAggregate, WindowAggregateConfig, WindowShape, WindowTrigger};
use weir_taskmanager::window::contents::{Aggregating, Listing, ProcessWindowFunction, WindowAggregator};
use weir_taskmanager::window::operator::WindowOperator;
use weir_taskmanager::window::trigger::Trigger;

/// The tumbling kind with an incremental (Avro) accumulator.
pub const PROFILES: &str = "window-profiles";
/// The session kind with a process-window function over (Protobuf) elements.
pub const VISITS: &str = "window-visits";

/// `(key, window_start, window_end, count)` rows being gathered, in `window-aggregate`'s output schema.
#[derive(Default)]
struct Rows {
    keys: BinaryBuilder,
    starts: TimestampMillisecondBuilder,
    ends: TimestampMillisecondBuilder,
    counts: Int64Builder,
    times: TimestampMillisecondBuilder,
}

impl Rows {
    fn push(&mut self, key: &[u8], window: TimeWindow, count: i64) {
        self.keys.append_value(key);
        self.starts.append_value(window.start);
        self.ends.append_value(window.end);
        self.counts.append_value(count);
        self.times.append_value(window.max_timestamp());
    }

    fn flush(&mut self, out: &mut Collector<'_>) -> Result<(), OperatorError> {
        if self.counts.len() == 0 {
            return Ok(());
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.keys.finish()),
            Arc::new(self.starts.finish()),
            Arc::new(self.ends.finish()),
            Arc::new(self.counts.finish()),
            Arc::new(self.times.finish()),
        ];
        let batch = RecordBatch::try_new(weir_taskmanager::builtins::output_schema(WindowAggregate::Count), columns)
            .map_err(|e| OperatorError::Records(format!("window rows: {e}")))?;
        out.emit_batch(batch)
    }
}

/// An incremental count per window whose accumulator is `T`.
pub struct CountInto<T> {
    rows: Rows,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T: Tally + Clone> WindowAggregator for CountInto<T> {
    type Acc = T;

    fn create(&self) -> T {
        T::default()
    }

    fn add(&mut self, acc: &mut T, _: &RecordBatch, _: usize) -> Result<(), OperatorError> {
        acc.add();
        Ok(())
    }

    fn merge(&self, acc: &mut T, other: &T) {
        // Tumbling windows have one slice each and never merge; a count is all a tally can fold.
        for _ in 0..other.count() {
            acc.add();
        }
    }

    fn emit(&mut self, key: &[u8], window: TimeWindow, acc: &T, _: &mut Collector<'_>) -> Result<(), OperatorError> {
        self.rows.push(key, window, acc.count());
        Ok(())
    }

    fn flush(&mut self, out: &mut Collector<'_>) -> Result<(), OperatorError> {
        self.rows.flush(out)
    }
}

/// A process-window function keeping one `T` per record and emitting how many a window holds.
pub struct CountElements<T> {
    rows: Rows,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T: Tally + Clone> ProcessWindowFunction for CountElements<T> {
    type Element = T;

    fn element(&mut self, _: &RecordBatch, _: usize) -> Result<T, OperatorError> {
        let mut e = T::default();
        e.add();
        Ok(e)
    }

    fn process(
        &mut self,
        key: &[u8],
        window: TimeWindow,
        elements: &[T],
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        self.rows.push(key, window, elements.iter().map(Tally::count).sum());
        self.rows.flush(out)
    }
}

/// The kind's description.
fn kind_info(kind: &str) -> KindInfo {
    KindInfo::new(kind, Role::Operator, true, env!("CARGO_PKG_VERSION"))
        .with_states(&[("window-contents", StateClass::Value, "per window")])
        .with_input(vec![weir_common::job::schema::key_column()])
}

/// Reads `window-aggregate`'s config for a kind that only takes `shape`'s windows (and event-time firing).
fn windows(
    kind: &str,
    config: &weir_common::job::kind::OperatorConfig,
    session: bool,
) -> Result<(WindowKind, i64), InvalidConfig> {
    let cfg = WindowAggregateConfig::from_map(config)?;
    let lateness = cfg.allowed_lateness_ms as i64;
    match (cfg.window, session, cfg.trigger) {
        (WindowShape::Tumbling { size_ms }, false, WindowTrigger::EventTime) => {
            Ok((WindowKind::Tumbling { size: size_ms as i64, offset: cfg.offset_ms }, lateness))
        }
        (WindowShape::Session { gap_ms }, true, WindowTrigger::EventTime) => {
            Ok((WindowKind::Session { gap: gap_ms as i64 }, lateness))
        }
        _ => {
            Err(format!("{kind} takes {} windows fired by event time", if session { "session" } else { "tumbling" })
                .into())
        }
    }
}

/// Registers `window-profiles` counting into accumulator `P` and `window-visits` keeping elements `V`.
pub fn register_kinds<P, V>(r: &mut Registry)
where
    P: Tally + Clone + StateCodec + TypeSignature + Send,
    V: Tally + Clone + StateCodec + TypeSignature + Send,
{
    let tumbling = WindowKind::Tumbling { size: 1, offset: 0 };
    let sig = WindowOperator::<Aggregating<CountInto<P>>>::signature::<Vec<u8>>(tumbling, Trigger::EventTime);
    r.register(signed(kind_info(PROFILES), &sig), |config| {
        let (kind, lateness) = windows(PROFILES, config, false)?;
        let f = CountInto::<P> { rows: Rows::default(), _t: Default::default() };
        Ok(Instance::Operator(Box::new(WindowOperator::new(
            kind,
            Trigger::EventTime,
            lateness,
            false,
            Aggregating::new(f),
        )?)))
    });
    let sessions = WindowKind::Session { gap: 1 };
    let sig = WindowOperator::<Listing<CountElements<V>>>::signature::<Vec<u8>>(sessions, Trigger::EventTime);
    r.register(signed(kind_info(VISITS), &sig), |config| {
        let (kind, lateness) = windows(VISITS, config, true)?;
        let f = CountElements::<V> { rows: Rows::default(), _t: Default::default() };
        Ok(Instance::Operator(Box::new(WindowOperator::new(
            kind,
            Trigger::EventTime,
            lateness,
            false,
            Listing::new(f),
        )?)))
    });
}
