//! What the relational kinds share: `join`, `interval-join`, `window-join`, `over`, `window-top` and
//! `winning-bids` each keep rows of their keyed inputs in keyed state (as `api::stored_rows` writes them) and only
//! what is their own differs. The skeleton here is everything else:
//!
//! - [`Relational`]: a kind implements it (its keyed states, what a batch of an input does, what one of its
//!   event-time timers does, what it emits after a watermark's timers) and gets its `Operator` from here: keyed
//!   state required, the inputs' columns restored and snapshotted, the second input's batches routed, timers of
//!   event time only, the gathered output flushed on each watermark and at end of input.
//! - [`Inputs`]: each input's columns, learned from its first batch and kept in union operator state beside the
//!   rows (a restored subtask reads the other input's rows before that input sends anything; a job whose inputs
//!   now have other columns is refused), and what the kind built from them (a join plan, an output schema),
//!   built again when they change.
//! - [`joined`]: rows of two inputs joined (the joined schema, `where` and `select`; pairs found for a batch).
//! - [`window`]: the tumbling windows of `window-join` and `window-top`.
//! - What several kinds read or build the same way, with the same errors: a batch's event times ([`times`]),
//!   keyed states once registered ([`ready`]), two inputs' lists of rows ([`input_lists`]), an output schema of
//!   kept columns and more ([`output_schema`]), how much a watermark's timers gather before emitting
//!   ([`EMIT_AT`]).
//!
//! What stays in each kind: its config and declaration, its keyed states and how a row is stored in them, which
//! rows are late, its timers and what they emit.

pub(crate) mod joined;
pub(crate) mod window;

use crate::api::batch::{event_time_field, event_times, EVENT_TIME};
use crate::api::operator::{Collector, InitContext, Operator, OperatorError, ProcessContext, SnapshotContext};
use crate::api::stored_rows::{restore_kept, snapshot_kept, KeptColumns};
use crate::api::timers::TimeDomain;
use arrow_array::{ArrayRef, RecordBatch, TimestampMillisecondArray};
use arrow_schema::{Field, Schema, SchemaRef};
use std::sync::Arc;
use weir_state::{KeyedStateBackend, ListState, StateDescriptor};

/// Rows a watermark's timers gather before they are emitted anyway (the rest go out after the last timer).
pub(crate) const EMIT_AT: usize = 4096;

/// What a relational kind does beyond the skeleton; the skeleton makes it an [`Operator`].
pub(crate) trait Relational: Send {
    /// The kind's name, as its errors say it.
    const KIND: &'static str;
    /// What the kind builds from its inputs' columns.
    type Built: Send;

    /// Its inputs' columns.
    fn inputs(&mut self) -> &mut Inputs<Self::Built>;

    /// Registers its keyed states, before any batch.
    fn register(&mut self, keyed: &mut dyn KeyedStateBackend) -> Result<(), OperatorError>;

    /// Processes a batch of input `s` (0 the first, 1 the second).
    fn process(
        &mut self,
        s: usize,
        batch: &RecordBatch,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError>;

    /// One of its event-time timers fired at `timestamp`, with its key and namespace current.
    fn fire(
        &mut self,
        timestamp: i64,
        _ctx: &mut ProcessContext<'_>,
        _out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        Err(OperatorError::Misuse(format!("{}: a timer at {timestamp} fired, but it sets none", Self::KIND)))
    }

    /// Emits what its timers gathered: after the timers of each watermark, and at end of input.
    fn flush(&mut self, _out: &mut Collector<'_>) -> Result<(), OperatorError> {
        Ok(())
    }
}

impl<R: Relational> Operator for R {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        let keyed =
            ctx.keyed.as_mut().ok_or_else(|| OperatorError::Misuse(format!("{} needs keyed state", R::KIND)))?;
        self.register(&mut **keyed)?;
        self.inputs().restore(ctx.operator_state)
    }

    fn process_batch(
        &mut self,
        batch: &RecordBatch,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        self.process(0, batch, ctx, out)
    }

    fn process_second_batch(
        &mut self,
        batch: &RecordBatch,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        if self.inputs().columns.len() < 2 {
            return Err(OperatorError::Misuse("a batch of a second input reached an operator that reads one".into()));
        }
        self.process(1, batch, ctx, out)
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        domain: TimeDomain,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        if domain != TimeDomain::EventTime {
            return Err(OperatorError::Misuse(format!("{} sets no processing-time timers", R::KIND)));
        }
        self.fire(timestamp, ctx, out)
    }

    fn on_watermark(
        &mut self,
        _watermark: i64,
        _ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        self.flush(out)
    }

    fn end_of_input(&mut self, _ctx: &mut ProcessContext<'_>, out: &mut Collector<'_>) -> Result<(), OperatorError> {
        self.flush(out)
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext<'_>) -> Result<(), OperatorError> {
        self.inputs().snapshot(ctx.operator_state)
    }
}

/// A relational kind's inputs: the columns it keeps of each (`api::stored_rows`), in union operator state
/// `state` under each input's name, and what it built from them (`T`: a join plan, an output schema).
pub(crate) struct Inputs<T> {
    kind: &'static str,
    state: &'static str,
    /// Each input's name in the state, and what errors call it.
    names: Vec<(&'static str, String)>,
    columns: Vec<KeptColumns>,
    built: Option<T>,
}

impl<T> Inputs<T> {
    /// The one input of kind `kind`, its columns kept in union state `state` (as `input`).
    pub(crate) fn one(kind: &'static str, state: &'static str) -> Self {
        Self::named(kind, state, [("input", format!("{kind}'s input"))])
    }

    /// The two inputs of kind `kind`, their columns kept in union state `state` (as `first` and `second`).
    pub(crate) fn two(kind: &'static str, state: &'static str) -> Self {
        Self::named(kind, state, [("first", "the first input".into()), ("second", "the second input".into())])
    }

    /// Inputs with their names in the state and what errors call them.
    pub(crate) fn named<const N: usize>(
        kind: &'static str,
        state: &'static str,
        names: [(&'static str, String); N],
    ) -> Self {
        let columns = names.iter().map(|_| KeptColumns::default()).collect();
        Inputs { kind, state, names: names.into(), columns, built: None }
    }

    fn restore(&mut self, store: &mut weir_state::OperatorStateStore) -> Result<(), OperatorError> {
        let mut inputs: Vec<(&str, &mut KeptColumns)> =
            self.names.iter().map(|(name, _)| *name).zip(self.columns.iter_mut()).collect();
        restore_kept(store, self.state, &mut inputs)
    }

    fn snapshot(&self, store: &mut weir_state::OperatorStateStore) -> Result<(), OperatorError> {
        let inputs: Vec<(&str, &KeptColumns)> =
            self.names.iter().map(|(name, _)| *name).zip(self.columns.iter()).collect();
        snapshot_kept(store, self.state, &inputs)
    }

    /// The columns kept of `batch` of input `s` (learned from it if they were not known), or why they cannot
    /// be (the input's columns changed). Nothing is built of an input's columns before they are known, so
    /// learning them leaves nothing stale.
    pub(crate) fn read(&mut self, s: usize, batch: &RecordBatch) -> Result<Vec<ArrayRef>, OperatorError> {
        let (Some(columns), Some((_, what))) = (self.columns.get_mut(s), self.names.get(s)) else {
            return Err(OperatorError::Misuse(format!("{}: no input {s}", self.kind)));
        };
        let (idx, _) = columns.of_batch(what, &batch.schema())?;
        Ok(idx.iter().map(|&i| batch.column(i).clone()).collect())
    }

    /// The columns kept of input `s`, as its rows are stored.
    pub(crate) fn stored(&self, s: usize) -> Result<SchemaRef, OperatorError> {
        self.columns.get(s).and_then(|c| c.stored.clone()).ok_or_else(|| {
            OperatorError::UnreadableState(format!("{}: stored rows of an input whose columns are unknown", self.kind))
        })
    }

    /// What was built from the inputs' columns (`build` builds it from them, each input's, when it is not).
    pub(crate) fn built(
        &mut self,
        build: impl FnOnce(&[SchemaRef]) -> Result<T, OperatorError>,
    ) -> Result<&T, OperatorError> {
        if self.built.is_none() {
            let stored = (0..self.columns.len()).map(|s| self.stored(s)).collect::<Result<Vec<_>, _>>()?;
            self.built = Some(build(&stored)?);
        }
        self.built.as_ref().ok_or_else(|| OperatorError::Misuse(format!("{}: nothing built", self.kind)))
    }
}

/// Registers the lists of rows of a two-input kind's inputs, `names`, namespaced (per bucket or window) or not.
pub(crate) fn input_lists(
    keyed: &mut dyn KeyedStateBackend,
    names: [&str; 2],
    namespaced: bool,
) -> Result<[ListState<Vec<u8>>; 2], OperatorError> {
    let mut list = |name| match namespaced {
        true => ListState::register(&mut *keyed, StateDescriptor::new(name).namespaced()),
        false => ListState::register(&mut *keyed, name),
    };
    Ok([list(names[0])?, list(names[1])?])
}

/// A batch's event times, or the error of kind `kind` whose input has none.
pub(crate) fn times<'a>(batch: &'a RecordBatch, kind: &str) -> Result<&'a TimestampMillisecondArray, OperatorError> {
    event_times(batch)
        .ok_or_else(|| OperatorError::Misuse(format!("{kind} needs event time: its input has no timestamps")))
}

/// A kind's keyed state `state` once registered, or the error of kind `kind` used before.
pub(crate) fn ready<'a, S>(state: &'a mut Option<S>, kind: &str) -> Result<&'a mut S, OperatorError> {
    state.as_mut().ok_or_else(|| OperatorError::Misuse(format!("{kind} used before initialize_state")))
}

/// The schema of output rows made of kept columns `kept` (but the event time), then `extra`, then the event time.
pub(crate) fn output_schema(kept: &SchemaRef, extra: impl IntoIterator<Item = Field>) -> SchemaRef {
    let mut fields: Vec<Field> =
        kept.fields().iter().filter(|f| f.name() != EVENT_TIME).map(|f| f.as_ref().clone()).collect();
    fields.extend(extra);
    fields.push(event_time_field());
    Arc::new(Schema::new(fields))
}
