//! What a window holds and how it is emitted: a window function that is either incremental ([`WindowAggregator`],
//! an accumulator per window or slice, [`Aggregating`]) or sees every element with the window's bounds
//! ([`ProcessWindowFunction`], a list per window or slice, [`Listing`]), behind the [`Contents`] the window
//! operator (`window/operator.rs`) drives. Accumulators and elements are typed state values, so an Avro or
//! Protobuf accumulator evolves across an upgrade as any other state does. A kind with its own layout (the
//! built-in `window-aggregate`'s fixed-size accumulators and running sliding part) implements [`Contents`] itself.

use crate::api::operator::{Collector, OperatorError};
use crate::window::assign::TimeWindow;
use crate::window::slicing::Slicing;
use arrow_array::RecordBatch;
use weir_state::signature::{StateSignature, TypeSignature};
use weir_state::{KeyedStateBackend, ListState, StateCodec, StateDescriptor, StateOptions, ValueState};

/// The state holding window contents (accumulators or elements), per slice, session or global window.
pub const CONTENTS_STATE: &str = "window-contents";

/// An incremental window function (Flink's `AggregateFunction`, with `merge` for slices and sessions): each
/// record is added to an accumulator, which is a typed state value.
pub trait WindowAggregator: Send + 'static {
    /// The accumulator: stored per slice or session, so its serializer decides how it evolves.
    type Acc: StateCodec + TypeSignature + Send;
    /// An empty accumulator.
    fn create(&self) -> Self::Acc;
    /// Called once per batch before its rows are added: look up columns here, not per row.
    fn begin_batch(&mut self, _batch: &RecordBatch) -> Result<(), OperatorError> {
        Ok(())
    }
    /// Adds row `row` of `batch` (the key is current) to `acc`.
    fn add(&mut self, acc: &mut Self::Acc, batch: &RecordBatch, row: usize) -> Result<(), OperatorError>;
    /// Folds `other` into `acc` (slices of one window, or merged sessions).
    fn merge(&self, acc: &mut Self::Acc, other: &Self::Acc);
    /// Emits the result of window `window` of `key`.
    fn emit(
        &mut self,
        key: &[u8],
        window: TimeWindow,
        acc: &Self::Acc,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError>;
    /// Sends what `emit` gathered downstream (called after each batch, timer and watermark).
    fn flush(&mut self, _out: &mut Collector<'_>) -> Result<(), OperatorError> {
        Ok(())
    }
}

/// A window function that sees every element of a window and its bounds (Flink's `ProcessWindowFunction`).
pub trait ProcessWindowFunction: Send + 'static {
    /// What is kept of a record: stored in list state, so its serializer decides how it evolves.
    type Element: StateCodec + TypeSignature + Send;
    /// Called once per batch before its rows are kept: look up columns here, not per row.
    fn begin_batch(&mut self, _batch: &RecordBatch) -> Result<(), OperatorError> {
        Ok(())
    }
    /// The element kept for row `row` of `batch`.
    fn element(&mut self, batch: &RecordBatch, row: usize) -> Result<Self::Element, OperatorError>;
    /// Emits whatever window `window` of `key` yields from its elements (in arrival order per slice).
    fn process(
        &mut self,
        key: &[u8],
        window: TimeWindow,
        elements: &[Self::Element],
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError>;
    /// Sends what `process` gathered downstream (called after each batch, timer and watermark).
    fn flush(&mut self, _out: &mut Collector<'_>) -> Result<(), OperatorError> {
        Ok(())
    }
}

/// How a window operator keeps a window's contents (an accumulator or a list of elements). Namespaces are slice
/// starts (tumbling and sliding windows), session ids or 0 (a global window).
pub trait Contents: Send {
    /// Registers the contents state.
    fn register(&mut self, b: &mut dyn KeyedStateBackend) -> Result<(), OperatorError>;
    /// Called once per batch before its rows are added.
    fn begin_batch(&mut self, batch: &RecordBatch) -> Result<(), OperatorError>;
    /// Whether row `row` of the batch begun adds nothing to any window (a built-in aggregate's null value): it is
    /// skipped, neither kept nor counted late.
    fn ignores(&self, _batch: &RecordBatch, _row: usize) -> bool {
        false
    }
    /// Adds a row to namespace `ns` of the current key; whether the namespace held nothing before (true when
    /// that is not known without a read).
    fn add(
        &mut self,
        b: &mut dyn KeyedStateBackend,
        ns: i64,
        batch: &RecordBatch,
        row: usize,
    ) -> Result<bool, OperatorError>;
    /// Adds rows `rows` (of one key, in arrival order) to namespace `ns`, none of whose windows has fired; whether
    /// the namespace held nothing before. An accumulator folds them first: one read and one write per group.
    fn add_rows(
        &mut self,
        b: &mut dyn KeyedStateBackend,
        ns: i64,
        batch: &RecordBatch,
        rows: &[u32],
    ) -> Result<bool, OperatorError> {
        let mut new = false;
        for &row in rows {
            new |= self.add(b, ns, batch, row as usize)?;
        }
        Ok(new)
    }
    /// After row `row` was added to slice `slice`, whose first window has fired (a late record within the allowed
    /// lateness): contents that keep a part of a fired window (the built-in running sliding part) update it.
    fn add_to_fired(
        &mut self,
        _b: &mut dyn KeyedStateBackend,
        _slicing: &Slicing,
        _slice: i64,
        _batch: &RecordBatch,
        _row: usize,
    ) -> Result<(), OperatorError> {
        Ok(())
    }
    /// Moves the contents of namespace `from` into `into`.
    fn merge(&mut self, b: &mut dyn KeyedStateBackend, from: i64, into: i64) -> Result<(), OperatorError>;
    /// Removes the contents of namespace `ns`.
    fn clear(&mut self, b: &mut dyn KeyedStateBackend, ns: i64) -> Result<(), OperatorError>;
    /// Emits window `window` of `key` from the contents of namespaces `parts` (in order), if any holds something;
    /// the last of them that did.
    fn fire(
        &mut self,
        b: &mut dyn KeyedStateBackend,
        key: &[u8],
        window: TimeWindow,
        parts: &mut dyn Iterator<Item = i64>,
        out: &mut Collector<'_>,
    ) -> Result<Option<i64>, OperatorError>;
    /// Fires the sliced window ending at `end` of `key` when the watermark passes it: `None` if it held nothing,
    /// else whether one of its slices that held something is also in the next window (whose timer is then set).
    fn fire_slices(
        &mut self,
        b: &mut dyn KeyedStateBackend,
        key: &[u8],
        slicing: &Slicing,
        end: i64,
        out: &mut Collector<'_>,
    ) -> Result<Option<bool>, OperatorError> {
        fire_combined(self, b, key, slicing, end, out)
    }
    /// Sends gathered output downstream.
    fn flush(&mut self, out: &mut Collector<'_>) -> Result<(), OperatorError>;
    /// Adds the contents state to a kind's signature.
    fn sign(signature: StateSignature) -> StateSignature
    where
        Self: Sized;
}

/// [`Contents::fire_slices`] combining every slice of the window ending at `end`.
pub fn fire_combined<C: Contents + ?Sized>(
    contents: &mut C,
    b: &mut dyn KeyedStateBackend,
    key: &[u8],
    slicing: &Slicing,
    end: i64,
    out: &mut Collector<'_>,
) -> Result<Option<bool>, OperatorError> {
    let window = TimeWindow { start: end - slicing.size(), end };
    // Slices come in time order: the last that held something is in the next window if any is.
    let last = contents.fire(b, key, window, &mut slicing.slices(end), out)?;
    Ok(last.map(|slice| slicing.in_next_window(slice, end)))
}

fn unregistered() -> OperatorError {
    OperatorError::Misuse("window operator used before initialize_state".into())
}

fn namespaced() -> StateOptions {
    StateOptions::default().namespaced()
}

/// Contents as one accumulator per namespace.
pub struct Aggregating<A: WindowAggregator> {
    f: A,
    state: Option<ValueState<A::Acc>>,
}

impl<A: WindowAggregator> Aggregating<A> {
    /// Contents aggregated by `f`.
    pub fn new(f: A) -> Self {
        Aggregating { f, state: None }
    }
}

impl<A: WindowAggregator> Contents for Aggregating<A> {
    fn register(&mut self, b: &mut dyn KeyedStateBackend) -> Result<(), OperatorError> {
        self.state = Some(ValueState::register(b, StateDescriptor { name: CONTENTS_STATE, options: namespaced() })?);
        Ok(())
    }

    fn begin_batch(&mut self, batch: &RecordBatch) -> Result<(), OperatorError> {
        self.f.begin_batch(batch)
    }

    fn add(
        &mut self,
        b: &mut dyn KeyedStateBackend,
        ns: i64,
        batch: &RecordBatch,
        row: usize,
    ) -> Result<bool, OperatorError> {
        self.add_rows(b, ns, batch, &[row as u32])
    }

    fn add_rows(
        &mut self,
        b: &mut dyn KeyedStateBackend,
        ns: i64,
        batch: &RecordBatch,
        rows: &[u32],
    ) -> Result<bool, OperatorError> {
        let state = self.state.as_mut().ok_or_else(unregistered)?;
        b.set_current_namespace(&ns.to_be_bytes());
        let (mut acc, new) = match state.value(b)? {
            Some(acc) => (acc, false),
            None => (self.f.create(), true),
        };
        for &row in rows {
            self.f.add(&mut acc, batch, row as usize)?;
        }
        state.update(b, &acc)?;
        Ok(new)
    }

    fn merge(&mut self, b: &mut dyn KeyedStateBackend, from: i64, into: i64) -> Result<(), OperatorError> {
        let state = self.state.as_mut().ok_or_else(unregistered)?;
        b.set_current_namespace(&from.to_be_bytes());
        let Some(other) = state.value(b)? else { return Ok(()) };
        state.clear(b)?;
        b.set_current_namespace(&into.to_be_bytes());
        let acc = match state.value(b)? {
            Some(mut acc) => {
                self.f.merge(&mut acc, &other);
                acc
            }
            None => other,
        };
        state.update(b, &acc)?;
        Ok(())
    }

    fn clear(&mut self, b: &mut dyn KeyedStateBackend, ns: i64) -> Result<(), OperatorError> {
        let state = self.state.as_ref().ok_or_else(unregistered)?;
        b.set_current_namespace(&ns.to_be_bytes());
        state.clear(b)?;
        Ok(())
    }

    fn fire(
        &mut self,
        b: &mut dyn KeyedStateBackend,
        key: &[u8],
        window: TimeWindow,
        parts: &mut dyn Iterator<Item = i64>,
        out: &mut Collector<'_>,
    ) -> Result<Option<i64>, OperatorError> {
        let state = self.state.as_ref().ok_or_else(unregistered)?;
        let mut total: Option<A::Acc> = None;
        let mut last = None;
        for ns in parts {
            b.set_current_namespace(&ns.to_be_bytes());
            if let Some(acc) = state.value(b)? {
                last = Some(ns);
                match &mut total {
                    Some(t) => self.f.merge(t, &acc),
                    None => total = Some(acc),
                }
            }
        }
        if let Some(acc) = total {
            self.f.emit(key, window, &acc, out)?;
        }
        Ok(last)
    }

    fn flush(&mut self, out: &mut Collector<'_>) -> Result<(), OperatorError> {
        self.f.flush(out)
    }

    fn sign(signature: StateSignature) -> StateSignature {
        signature.value::<A::Acc>(CONTENTS_STATE).in_namespace::<i64>(CONTENTS_STATE)
    }
}

/// Contents as the list of elements per namespace.
pub struct Listing<P: ProcessWindowFunction> {
    f: P,
    state: Option<ListState<P::Element>>,
    /// The elements of the window being fired (reused).
    elements: Vec<P::Element>,
}

impl<P: ProcessWindowFunction> Listing<P> {
    /// Contents kept as elements for `f`.
    pub fn new(f: P) -> Self {
        Listing { f, state: None, elements: Vec::new() }
    }
}

impl<P: ProcessWindowFunction> Contents for Listing<P> {
    fn register(&mut self, b: &mut dyn KeyedStateBackend) -> Result<(), OperatorError> {
        self.state = Some(ListState::register(b, StateDescriptor { name: CONTENTS_STATE, options: namespaced() })?);
        Ok(())
    }

    fn begin_batch(&mut self, batch: &RecordBatch) -> Result<(), OperatorError> {
        self.f.begin_batch(batch)
    }

    fn add(
        &mut self,
        b: &mut dyn KeyedStateBackend,
        ns: i64,
        batch: &RecordBatch,
        row: usize,
    ) -> Result<bool, OperatorError> {
        let state = self.state.as_mut().ok_or_else(unregistered)?;
        let element = self.f.element(batch, row)?;
        b.set_current_namespace(&ns.to_be_bytes());
        // Appending never reads the list, so whether it was empty is not known: the window's timers are set again
        // (setting a timer that exists is a no-op).
        state.add(b, &element)?;
        Ok(true)
    }

    fn merge(&mut self, b: &mut dyn KeyedStateBackend, from: i64, into: i64) -> Result<(), OperatorError> {
        let state = self.state.as_mut().ok_or_else(unregistered)?;
        b.set_current_namespace(&from.to_be_bytes());
        let moved = state.get(b)?;
        if moved.is_empty() {
            return Ok(());
        }
        state.clear(b)?;
        b.set_current_namespace(&into.to_be_bytes());
        state.add_all(b, moved.iter())?;
        Ok(())
    }

    fn clear(&mut self, b: &mut dyn KeyedStateBackend, ns: i64) -> Result<(), OperatorError> {
        let state = self.state.as_ref().ok_or_else(unregistered)?;
        b.set_current_namespace(&ns.to_be_bytes());
        state.clear(b)?;
        Ok(())
    }

    fn fire(
        &mut self,
        b: &mut dyn KeyedStateBackend,
        key: &[u8],
        window: TimeWindow,
        parts: &mut dyn Iterator<Item = i64>,
        out: &mut Collector<'_>,
    ) -> Result<Option<i64>, OperatorError> {
        let state = self.state.as_ref().ok_or_else(unregistered)?;
        self.elements.clear();
        let mut last = None;
        for ns in parts {
            b.set_current_namespace(&ns.to_be_bytes());
            let before = self.elements.len();
            self.elements.extend(state.get(b)?);
            if self.elements.len() > before {
                last = Some(ns);
            }
        }
        if self.elements.is_empty() {
            return Ok(None);
        }
        self.f.process(key, window, &self.elements, out)?;
        Ok(last)
    }

    fn flush(&mut self, out: &mut Collector<'_>) -> Result<(), OperatorError> {
        self.f.flush(out)
    }

    fn sign(signature: StateSignature) -> StateSignature {
        signature.list::<P::Element>(CONTENTS_STATE).in_namespace::<i64>(CONTENTS_STATE)
    }
}
