//! Output edges and chaining: batches passed down a chain of operators as values, then partitioned onto the
//! task's output channels (the key group of every row computed once, for the whole batch, on key-by edges),
//! gathered per channel and sent as Arrow IPC frames.

use super::error::{in_operator, TaskError};
use crate::api::batch::{event_times, keys, with_key_group, KEY_GROUP};
use crate::api::operator::{Collector, Operator, OperatorError, ProcessContext, RuntimeInfo, Source};
use crate::api::timers::{TimeDomain, TimerSlot};
use crate::net::{BatchEncoder, Frame, OutputChannel, MAX_BATCH_ROWS};
use crate::time::MIN_WATERMARK;
use arrow_array::{Array, ArrayRef, RecordBatch, UInt16Array};
use arrow_schema::SchemaRef;
use std::sync::Arc;
use weir_common::ids::KeyGroup;
use weir_common::job::spec::Partitioning;
use weir_common::state::keygroup::{key_groups_of_column, subtask_for_key_group};
use weir_state::{KeyedStateBackend, OperatorStateStore};

/// Rows per network batch: a channel's rows are sent once this many are gathered (or the linger expires).
pub(super) const BATCH_RECORDS: usize = 1024;
// Consumers refuse batches of more rows than this.
const _: () = assert!(BATCH_RECORDS <= MAX_BATCH_ROWS as usize);
pub(super) enum Head {
    Source(Box<dyn Source>),
    Operator(Box<dyn Operator>),
}

pub(super) struct ChainOp {
    pub(super) info: RuntimeInfo,
    pub(super) head: Head,
    pub(super) keyed: Option<Box<dyn KeyedStateBackend>>,
    /// Its timers (keyed operators).
    pub(super) timers: TimerSlot,
    pub(super) op_state: OperatorStateStore,
    /// The operator's event-time watermark.
    pub(super) watermark: i64,
    /// Records that reached the operator at or behind its watermark.
    pub(super) late_records: metrics::Counter,
    /// The chained operators its main output feeds (indexes in the chain, each after its own).
    pub(super) feeds: Vec<usize>,
    /// The output edges its main output goes to (indexes in the task's outputs).
    pub(super) edges: Vec<usize>,
    /// Whether the task has been canceled: a long run of timers stops at the next one.
    pub(super) canceled: CancelSignal,
}

/// A task's cancel signal as its thread reads it between timers: one atomic load (a `watch` receiver's
/// `has_changed`; the only value ever sent is `true`), no lock.
#[derive(Clone)]
pub(super) struct CancelSignal(tokio::sync::watch::Receiver<bool>);

impl CancelSignal {
    pub(super) fn new(cancel: tokio::sync::watch::Receiver<bool>) -> Self {
        CancelSignal(cancel)
    }

    /// Whether the task was asked to stop.
    pub(super) fn is_set(&self) -> bool {
        matches!(self.0.has_changed(), Ok(true))
    }
}

/// Runs `batch` through the operators of `chain` from its head (each one's output feeding the operators it
/// feeds, batch by batch) and routes what they emit to their edges of `outputs`.
#[cfg(test)]
pub(super) fn push_chain(
    chain: &mut [ChainOp],
    outputs: &mut [OutputEdge],
    batch: RecordBatch,
) -> Result<(), TaskError> {
    push_op(chain, 0, outputs, 0, batch)
}

/// [`push_chain`] with a batch of the head's input `input` (0, or 1 for a two-input head's second input).
pub(super) fn push_chain_from(
    chain: &mut [ChainOp],
    outputs: &mut [OutputEdge],
    input: usize,
    batch: RecordBatch,
) -> Result<(), TaskError> {
    push_op(chain, 0, outputs, input, batch)
}

/// Runs `batch` (of input `input`) through the first operator of `chain`, whose index in the whole chain is
/// `base`, and hands what it emits on.
fn push_op(
    chain: &mut [ChainOp],
    base: usize,
    outputs: &mut [OutputEdge],
    input: usize,
    batch: RecordBatch,
) -> Result<(), TaskError> {
    let Some((op, rest)) = chain.split_first_mut() else {
        return Err(TaskError::Other("a batch for an operator the chain does not have".into()));
    };
    let Head::Operator(o) = &mut op.head else {
        return Err(TaskError::Other(format!("source {:?} cannot take input", op.info.uid)));
    };
    if op.watermark > MIN_WATERMARK {
        let late = late_rows(&batch, op.watermark);
        if late > 0 {
            op.late_records.increment(late as u64);
        }
    }
    let mut ctx = op_context(&op.info, &mut op.keyed, &mut op.timers, op.watermark);
    let mut downstream = chain_out(&op.info.uid, &op.feeds, &op.edges, rest, base + 1, outputs);
    let mut out = Collector::routed(&mut downstream);
    let result = match input {
        0 => o.process_batch(&batch, &mut ctx, &mut out),
        _ => o.process_second_batch(&batch, &mut ctx, &mut out),
    };
    result.map_err(|e| in_operator(&op.info.uid, e))?;
    out.flush()?;
    Ok(())
}

/// Hands a batch an operator emitted on its main output to the chained operators it `feeds` (indexes in the
/// chain; `rest` is the chain from index `base` on) and to its `edges` of `outputs`.
pub(super) fn deliver(
    feeds: &[usize],
    edges: &[usize],
    rest: &mut [ChainOp],
    base: usize,
    outputs: &mut [OutputEdge],
    batch: RecordBatch,
) -> Result<(), TaskError> {
    for &f in feeds {
        let at = f.checked_sub(base).filter(|&at| at < rest.len()).ok_or_else(|| {
            TaskError::Other(format!("a chained operator feeds chain index {f}, outside {base}..{}", base + rest.len()))
        })?;
        // A batch's columns are shared: a second reader costs a reference count, not a copy.
        push_op(&mut rest[at..], f, outputs, 0, batch.clone())?;
    }
    for &e in edges {
        let edge = outputs.get_mut(e).ok_or_else(|| TaskError::Other(format!("no output edge {e}")))?;
        edge.records_out.increment(batch.num_rows() as u64);
        edge.emit(&batch)?;
    }
    Ok(())
}

/// Rows of `batch` whose event time is at or behind `watermark`.
fn late_rows(batch: &RecordBatch, watermark: i64) -> usize {
    let Some(times) = event_times(batch) else { return 0 };
    match times.nulls() {
        None => times.values().iter().filter(|t| **t <= watermark).count(),
        Some(_) => times.iter().filter(|t| t.is_some_and(|t| t <= watermark)).count(),
    }
}

/// Advances the watermark of `chain` to `watermark`: each operator in turn takes it and hands on what it emits
/// (before the watermark reaches the next one), then the watermark goes out on every output edge. With
/// `hooks` false (a task restored after its end of input) the operators only take note of it.
pub(super) fn advance_watermark(
    chain: &mut [ChainOp],
    outputs: &mut [OutputEdge],
    watermark: i64,
    hooks: bool,
) -> Result<(), TaskError> {
    for i in 0..chain.len() {
        let (left, rest) = chain.split_at_mut(i + 1);
        let op = &mut left[i];
        if watermark <= op.watermark {
            continue;
        }
        op.watermark = watermark;
        if hooks {
            // Timers first, in timestamp order, then the operator's own hook (Flink's `processWatermark`).
            fire_timers(op, rest, i + 1, outputs, TimeDomain::EventTime, watermark)?;
        }
        if let (Head::Operator(o), true) = (&mut op.head, hooks) {
            let mut ctx = op_context(&op.info, &mut op.keyed, &mut op.timers, watermark);
            let mut downstream = chain_out(&op.info.uid, &op.feeds, &op.edges, rest, i + 1, outputs);
            let mut out = Collector::routed(&mut downstream);
            o.on_watermark(watermark, &mut ctx, &mut out).map_err(|e| in_operator(&op.info.uid, e))?;
            out.flush()?;
        }
    }
    for edge in outputs {
        edge.broadcast(&Frame::Watermark(watermark))?;
    }
    Ok(())
}

/// The context an operator's hooks get: its keyed state and timers (keyed operators) at `watermark`.
pub(crate) fn op_context<'a>(
    info: &'a RuntimeInfo,
    keyed: &'a mut Option<Box<dyn KeyedStateBackend>>,
    timers: &'a mut TimerSlot,
    watermark: i64,
) -> ProcessContext<'a> {
    let ctx = ProcessContext::new(info, keyed_mut(keyed)).at_watermark(watermark);
    ctx.with_timers(timers)
}

/// Fires operator `op`'s timers of `domain` due at `time`, in timestamp order, each with its key and namespace
/// current; what they emit goes on down the chain (`rest`, from chain index `base` on). Returns how many fired.
pub(super) fn fire_timers(
    op: &mut ChainOp,
    rest: &mut [ChainOp],
    base: usize,
    outputs: &mut [OutputEdge],
    domain: TimeDomain,
    time: i64,
) -> Result<u64, TaskError> {
    let ChainOp { info, head, keyed, timers, watermark, feeds, edges, canceled, .. } = op;
    let (Head::Operator(o), Some(_)) = (head, keyed.as_ref()) else { return Ok(0) };
    if timers.get().and_then(|s| s.next_timestamp(domain)).is_none_or(|next| next > time) {
        return Ok(0);
    }
    let mut downstream = chain_out(&info.uid, feeds, edges, rest, base, outputs);
    let mut out = Collector::routed(&mut downstream);
    let mut ctx = op_context(info, keyed, timers, *watermark);
    let fired = fire_due(o.as_mut(), &mut ctx, domain, time, &mut out, &|| canceled.is_set())?;
    out.flush()?;
    Ok(fired)
}

/// Fires the timers of `domain` due at `time` of the operator `o` whose context is `ctx`, in timestamp order,
/// each with its key and namespace current; what they emit goes to `out`. Returns how many fired; stops with
/// [`TaskError::Canceled`] between two timers once `canceled` says so. A task fires them so, and so does the
/// operator test harness.
pub(crate) fn fire_due<O: Operator + ?Sized>(
    o: &mut O,
    ctx: &mut ProcessContext<'_>,
    domain: TimeDomain,
    time: i64,
    out: &mut Collector<'_>,
    canceled: &dyn Fn() -> bool,
) -> Result<u64, TaskError> {
    let mut fired = 0;
    while let Some(ts) = ctx.pop_due_timer(domain, time)? {
        // A watermark can make millions of timers due at once: a canceled task stops between two of them.
        if canceled() {
            return Err(TaskError::Canceled);
        }
        fired += 1;
        let result = o.on_timer(ts, domain, ctx, out);
        result.map_err(|e| in_operator(&ctx.info.uid, e))?;
    }
    Ok(fired)
}

/// How long until the chain's earliest processing-time timer is due on its operator's clock, if it has one.
pub(super) fn until_processing_timer(chain: &mut [ChainOp]) -> Option<std::time::Duration> {
    chain
        .iter_mut()
        .filter_map(|op| {
            let next = op.timers.get()?.next_timestamp(TimeDomain::ProcessingTime)?;
            let now = op.keyed.as_ref()?.now_ms() as i64;
            Some(std::time::Duration::from_millis(next.saturating_sub(now).max(0) as u64))
        })
        .min()
}

/// Fires the processing-time timers of every operator of `chain` that are due on its clock.
pub(super) fn fire_processing_timers(chain: &mut [ChainOp], outputs: &mut [OutputEdge]) -> Result<u64, TaskError> {
    let mut fired = 0;
    for i in 0..chain.len() {
        let (left, rest) = chain.split_at_mut(i + 1);
        let op = &mut left[i];
        let Some(next) = op.timers.get().and_then(|s| s.next_timestamp(TimeDomain::ProcessingTime)) else { continue };
        let Some(now) = op.keyed.as_ref().map(|k| k.now_ms() as i64) else { continue };
        if next <= now {
            fired += fire_timers(op, rest, i + 1, outputs, TimeDomain::ProcessingTime, now)?;
        }
    }
    Ok(fired)
}

/// What operator `uid`'s collector hands on: its main output to the chained operators it `feeds` (in `rest`, the
/// chain from index `base` on) and its `edges`, a side output to the output edges that carry it.
pub(super) fn chain_out<'a>(
    uid: &'a str,
    feeds: &'a [usize],
    edges: &'a [usize],
    rest: &'a mut [ChainOp],
    base: usize,
    outputs: &'a mut [OutputEdge],
) -> impl FnMut(Option<&str>, RecordBatch) -> Result<(), OperatorError> + 'a {
    move |tag, batch| {
        let sent = match tag {
            None => deliver(feeds, edges, rest, base, outputs, batch),
            Some(tag) => route_side(outputs, uid, tag, batch),
        };
        sent.map_err(|e| match e {
            TaskError::Operator(e) => e,
            other => OperatorError::External(other.to_string()),
        })
    }
}

/// Hands a batch operator `uid` emitted on side output `tag` to the edges that carry it (none: dropped).
fn route_side(outputs: &mut [OutputEdge], uid: &str, tag: &str, batch: RecordBatch) -> Result<(), TaskError> {
    for edge in outputs {
        if edge.side.as_ref().is_some_and(|(u, t)| u == uid && t == tag) {
            edge.records_out.increment(batch.num_rows() as u64);
            edge.emit(&batch)?;
        }
    }
    Ok(())
}

/// What waits to be sent to one target subtask.
#[derive(Default)]
pub(super) struct Pending {
    /// Batches (or the batches rows are picked from), all of one schema.
    batches: Vec<RecordBatch>,
    /// On a key-by edge, the rows picked, as `(batch, row)`; empty when whole batches wait.
    picked: Vec<(usize, usize)>,
    rows: usize,
}

/// One target subtask's side of an edge: its channel, the rows waiting for it and the IPC stream it is sent.
pub(super) struct Target {
    pub(super) channel: OutputChannel,
    pending: Pending,
    encoder: Option<(SchemaRef, BatchEncoder)>,
}

impl Target {
    /// A target sending to `channel`.
    pub(super) fn new(channel: OutputChannel) -> Self {
        Target { channel, pending: Pending::default(), encoder: None }
    }
}

/// One output edge: a partitioner and a target per downstream subtask.
pub(super) struct OutputEdge {
    pub(super) partitioning: Partitioning,
    pub(super) targets: Vec<Target>,
    pub(super) next: usize,
    pub(super) to_parallelism: u32,
    pub(super) max_parallelism: u32,
    pub(super) records_out: metrics::Counter,
    /// The key groups of the batch being routed, and the rows each target takes (reused).
    pub(super) groups: Vec<u16>,
    pub(super) rows_of: Vec<Vec<usize>>,
    /// The last input schema seen on a key-by edge and the same with the key-group column.
    pub(super) keyed_schema: Option<(SchemaRef, SchemaRef)>,
    /// The side output it carries, as `(operator uid, tag)`; `None` for the chain tail's main output.
    pub(super) side: Option<(String, String)>,
}

impl OutputEdge {
    /// Sends `batch` on as the edge's partitioning says.
    pub(super) fn emit(&mut self, batch: &RecordBatch) -> Result<(), TaskError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let batch = &without_key_group(batch);
        match self.partitioning {
            // A descriptor never holds unspecified (decoding refuses it).
            Partitioning::Forward | Partitioning::Unspecified => self.push_whole(0, batch),
            // Round-robin by batch: a whole batch to one target, the next to the next one.
            Partitioning::Rebalance => {
                let t = self.next;
                self.next = (self.next + 1) % self.targets.len();
                self.push_whole(t, batch)
            }
            Partitioning::KeyBy => self.push_keyed(batch),
            Partitioning::Broadcast => {
                for t in 0..self.targets.len() {
                    self.push_whole(t, batch)?;
                }
                Ok(())
            }
        }
    }

    fn push_whole(&mut self, t: usize, batch: &RecordBatch) -> Result<(), TaskError> {
        let target = &mut self.targets[t];
        if target.pending.batches.first().is_some_and(|b| b.schema() != batch.schema()) {
            self.flush(t)?;
        }
        let p = &mut self.targets[t].pending;
        p.batches.push(batch.clone());
        p.rows += batch.num_rows();
        if p.rows >= BATCH_RECORDS {
            self.flush(t)?;
        }
        Ok(())
    }

    /// Routes each row by its key's group: the groups of the whole batch are computed in one pass and travel
    /// with the rows (the [`KEY_GROUP`] column), so the keyed operator downstream does not hash again.
    fn push_keyed(&mut self, batch: &RecordBatch) -> Result<(), TaskError> {
        let keys = keys(batch)?;
        self.groups.clear();
        key_groups_of_column(keys.value_offsets(), keys.value_data(), self.max_parallelism, &mut self.groups);
        let schema = match &self.keyed_schema {
            Some((input, with)) if *input == batch.schema() => with.clone(),
            _ => {
                let with = with_key_group(&batch.schema());
                self.keyed_schema = Some((batch.schema(), with.clone()));
                with
            }
        };
        let (p, m) = (self.to_parallelism, self.max_parallelism);
        for rows in &mut self.rows_of {
            rows.clear();
        }
        for (row, kg) in self.groups.iter().enumerate() {
            let t = subtask_for_key_group(KeyGroup(*kg as u32), p, m).0 as usize;
            self.rows_of[t].push(row);
        }
        let groups: ArrayRef = Arc::new(UInt16Array::from(std::mem::take(&mut self.groups)));
        let mut columns = batch.columns().to_vec();
        columns.push(groups);
        let batch = RecordBatch::try_new(schema, columns).map_err(|e| TaskError::Other(e.to_string()))?;
        for t in 0..self.targets.len() {
            if self.rows_of[t].is_empty() {
                continue;
            }
            if self.targets[t].pending.batches.first().is_some_and(|b| b.schema() != batch.schema()) {
                self.flush(t)?;
            }
            let p = &mut self.targets[t].pending;
            let at = p.batches.len();
            p.batches.push(batch.clone());
            p.picked.extend(self.rows_of[t].iter().map(|row| (at, *row)));
            p.rows += self.rows_of[t].len();
            if p.rows >= BATCH_RECORDS {
                self.flush(t)?;
            }
        }
        Ok(())
    }

    /// Sends what waits for target `t` as one batch frame (first the schema, when the channel's stream has
    /// none or another).
    pub(super) fn flush(&mut self, t: usize) -> Result<(), TaskError> {
        let target = &mut self.targets[t];
        let pending = std::mem::take(&mut target.pending);
        if pending.rows == 0 {
            return Ok(());
        }
        let arrow = |e: arrow_schema::ArrowError| TaskError::Other(format!("building an output batch: {e}"));
        let batch = if !pending.picked.is_empty() {
            let refs: Vec<&RecordBatch> = pending.batches.iter().collect();
            arrow_select::interleave::interleave_record_batch(&refs, &pending.picked).map_err(arrow)?
        } else if pending.batches.len() == 1 {
            pending.batches.into_iter().next().unwrap_or_else(|| unreachable!("one batch"))
        } else {
            arrow_select::concat::concat_batches(&pending.batches[0].schema(), &pending.batches).map_err(arrow)?
        };
        let schema = batch.schema();
        if target.encoder.as_ref().is_none_or(|(s, _)| *s != schema) {
            let (encoder, frame) = BatchEncoder::new(&schema).map_err(|e| TaskError::Other(e.to_string()))?;
            target.encoder = Some((schema, encoder));
            target.channel.send_blocking(frame)?;
        }
        let Some((_, encoder)) = target.encoder.as_mut() else { unreachable!("set above") };
        for frame in encoder.encode_frames(&batch).map_err(|e| TaskError::Other(e.to_string()))? {
            target.channel.send_blocking(frame)?;
        }
        Ok(())
    }

    pub(super) fn flush_all(&mut self) -> Result<(), TaskError> {
        for t in 0..self.targets.len() {
            self.flush(t)?;
        }
        Ok(())
    }

    pub(super) fn broadcast(&mut self, frame: &Frame) -> Result<(), TaskError> {
        self.flush_all()?;
        let bytes = crate::net::encode_frame(frame);
        for t in &mut self.targets {
            t.channel.send_blocking(bytes.clone())?;
        }
        Ok(())
    }
}

/// `batch` without the key-group column a key-by edge added before it reached this chain: a row's group is
/// computed again where it is routed by key again, since an operator may have changed its key.
fn without_key_group(batch: &RecordBatch) -> RecordBatch {
    let mut b = batch.clone();
    if let Ok(i) = batch.schema().index_of(KEY_GROUP) {
        b.remove_column(i);
    }
    b
}

/// Shortens the trait object's lifetime, which `Option::as_deref_mut` cannot do behind `&mut`.
pub(crate) fn keyed_mut(k: &mut Option<Box<dyn KeyedStateBackend>>) -> Option<&mut dyn KeyedStateBackend> {
    match k {
        Some(b) => Some(b.as_mut()),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::batch::{batch_of, records};
    use crate::api::record::{Record, Value};
    use std::sync::{Arc as StdArc, Mutex};
    use std::time::Duration;
    use weir_common::ids::SubtaskIndex;
    use weir_common::job::spec::StateBackend;
    use weir_common::state::keygroup::KeyGroupRange;
    use weir_state::{open_keyed_backend, ManualClock};

    /// Sets an event-time timer at each record's timestamp and a processing-time one 100 ms later; each firing
    /// emits `(key, timestamp)` with value 0 for event time and 1 for processing time.
    struct TimerEcho;

    impl Operator for TimerEcho {
        fn process_batch(
            &mut self,
            batch: &RecordBatch,
            ctx: &mut ProcessContext<'_>,
            _out: &mut Collector<'_>,
        ) -> Result<(), OperatorError> {
            for r in records(batch)? {
                ctx.keyed()?.set_current_key(&r.key);
                let mut t = ctx.timers()?;
                t.register_event_time_timer(r.timestamp.unwrap_or_default())?;
                let at = t.current_processing_time() + 100;
                t.register_processing_time_timer(at)?;
                // Again: one timer per key, namespace, time and domain.
                t.register_processing_time_timer(at)?;
            }
            Ok(())
        }

        fn on_timer(
            &mut self,
            timestamp: i64,
            domain: TimeDomain,
            ctx: &mut ProcessContext<'_>,
            out: &mut Collector<'_>,
        ) -> Result<(), OperatorError> {
            let key = ctx.current_key().unwrap_or_default().to_vec();
            out.emit(Record::new_i64(&key, (domain == TimeDomain::ProcessingTime) as i64).at(timestamp))
        }
    }

    /// `(key, domain, timestamp)` of what reached [`Keep`].
    type Kept = StdArc<Mutex<Vec<(Vec<u8>, i64, i64)>>>;

    /// Keeps what reaches it.
    struct Keep(Kept);

    impl Operator for Keep {
        fn process_batch(
            &mut self,
            batch: &RecordBatch,
            _: &mut ProcessContext<'_>,
            _: &mut Collector<'_>,
        ) -> Result<(), OperatorError> {
            let mut kept = self.0.lock().unwrap();
            for r in records(batch)? {
                let Value::I64(domain) = r.value else { panic!("{r:?}") };
                kept.push((r.key.to_vec(), domain, r.timestamp.unwrap_or_default()));
            }
            Ok(())
        }
    }

    fn op(uid: &str, head: Box<dyn Operator>, keyed: Option<Box<dyn KeyedStateBackend>>) -> ChainOp {
        ChainOp {
            info: RuntimeInfo {
                uid: uid.into(),
                job_id: "j".into(),
                attempt: 1,
                subtask: SubtaskIndex(0),
                parallelism: 1,
                max_parallelism: 128,
                key_group_range: KeyGroupRange { start: 0, end: 127 },
            },
            head: Head::Operator(head),
            keyed,
            timers: TimerSlot::default(),
            op_state: OperatorStateStore::new(),
            watermark: MIN_WATERMARK,
            late_records: metrics::Counter::noop(),
            feeds: Vec::new(),
            edges: Vec::new(),
            canceled: CancelSignal::new(tokio::sync::watch::channel(false).1),
        }
    }

    /// A watermark that makes thousands of timers due: a cancel sent while they fire stops the task at the next
    /// one (a canceled task once spun through a firing for minutes).
    #[test]
    fn a_cancel_stops_a_long_run_of_timers_at_the_next_one() {
        /// Cancels its own task at its 100th timer.
        struct CancelsAt100(tokio::sync::watch::Sender<bool>, StdArc<Mutex<u32>>);
        impl Operator for CancelsAt100 {
            fn process_batch(
                &mut self,
                batch: &RecordBatch,
                ctx: &mut ProcessContext<'_>,
                _: &mut Collector<'_>,
            ) -> Result<(), OperatorError> {
                for r in records(batch)? {
                    ctx.keyed()?.set_current_key(&r.key);
                    ctx.timers()?.register_event_time_timer(r.timestamp.unwrap_or_default())?;
                }
                Ok(())
            }

            fn on_timer(
                &mut self,
                _: i64,
                _: TimeDomain,
                _: &mut ProcessContext<'_>,
                _: &mut Collector<'_>,
            ) -> Result<(), OperatorError> {
                let mut fired = self.1.lock().unwrap();
                *fired += 1;
                if *fired == 100 {
                    self.0.send(true).unwrap();
                }
                Ok(())
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        let backend =
            open_keyed_backend(StateBackend::Heap, dir.path(), 128, range, None, &Default::default()).unwrap();
        let (cancel, canceled) = tokio::sync::watch::channel(false);
        let fired = StdArc::new(Mutex::new(0));
        let mut chain = vec![op("spin", Box::new(CancelsAt100(cancel, fired.clone())), Some(backend))];
        chain[0].canceled = CancelSignal::new(canceled);
        let input: Vec<Record> = (0..10_000u32).map(|k| Record::new_i64(&k.to_be_bytes(), 0).at(5)).collect();
        push_chain(&mut chain, &mut [], batch_of(&input).unwrap()).unwrap();
        let e = advance_watermark(&mut chain, &mut [], 10, true).unwrap_err();
        assert!(matches!(e, TaskError::Canceled), "{e}");
        assert_eq!(*fired.lock().unwrap(), 100, "no timer fires after the cancel");
    }

    #[test]
    fn processing_time_timers_fire_on_the_manual_clock_and_event_time_ones_on_the_watermark() {
        let dir = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        let mut backend =
            open_keyed_backend(StateBackend::Rocksdb, dir.path(), 128, range, None, &Default::default()).unwrap();
        let clock = StdArc::new(ManualClock::new(1_000));
        backend.set_clock(clock.clone());
        let kept = StdArc::new(Mutex::new(Vec::new()));
        let mut chain =
            vec![op("echo", Box::new(TimerEcho), Some(backend)), op("keep", Box::new(Keep(kept.clone())), None)];
        chain[0].feeds = vec![1];
        let input = [Record::new_i64(b"a", 0).at(10), Record::new_i64(b"b", 0).at(20)];
        push_chain(&mut chain, &mut [], batch_of(&input).unwrap()).unwrap();

        assert_eq!(until_processing_timer(&mut chain), Some(Duration::from_millis(100)));
        assert_eq!(fire_processing_timers(&mut chain, &mut []).unwrap(), 0, "not due on the clock yet");
        clock.advance(Duration::from_millis(99));
        assert_eq!(fire_processing_timers(&mut chain, &mut []).unwrap(), 0);
        clock.advance(Duration::from_millis(1));
        assert_eq!(fire_processing_timers(&mut chain, &mut []).unwrap(), 2, "one per key, not two");
        assert_eq!(until_processing_timer(&mut chain), None);
        let mut fired = std::mem::take(&mut *kept.lock().unwrap());
        fired.sort();
        assert_eq!(fired, [(b"a".to_vec(), 1, 1_100), (b"b".to_vec(), 1, 1_100)]);

        advance_watermark(&mut chain, &mut [], 15, true).unwrap();
        assert_eq!(*kept.lock().unwrap(), [(b"a".to_vec(), 0, 10)], "only the timer the watermark passed");
        advance_watermark(&mut chain, &mut [], 15, true).unwrap();
        advance_watermark(&mut chain, &mut [], 30, true).unwrap();
        assert_eq!(*kept.lock().unwrap(), [(b"a".to_vec(), 0, 10), (b"b".to_vec(), 0, 20)], "each fires once");
    }

    #[test]
    fn a_timer_firing_without_on_timer_is_an_error_naming_the_operator() {
        struct NoTimers;
        impl Operator for NoTimers {
            fn process_batch(
                &mut self,
                batch: &RecordBatch,
                ctx: &mut ProcessContext<'_>,
                _: &mut Collector<'_>,
            ) -> Result<(), OperatorError> {
                for r in records(batch)? {
                    ctx.keyed()?.set_current_key(&r.key);
                    ctx.timers()?.register_event_time_timer(5)?;
                }
                Ok(())
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        let backend =
            open_keyed_backend(StateBackend::Heap, dir.path(), 128, range, None, &Default::default()).unwrap();
        let mut chain = vec![op("lazy", Box::new(NoTimers), Some(backend))];
        push_chain(&mut chain, &mut [], batch_of(&[Record::new_i64(b"k", 1)]).unwrap()).unwrap();
        let e = advance_watermark(&mut chain, &mut [], 10, true).unwrap_err().to_string();
        assert!(e.contains("\"lazy\"") && e.contains("does not implement on_timer"), "{e}");
        // An unkeyed operator has no timers.
        let mut chain = vec![op("plain", Box::new(NoTimers), None)];
        let e =
            push_chain(&mut chain, &mut [], batch_of(&[Record::new_i64(b"k", 1)]).unwrap()).unwrap_err().to_string();
        assert!(e.contains("not keyed"), "{e}");
    }
}
