//! The window operator (Flink's `WindowOperator`): any assigner — tumbling, sliding, session, global —, any
//! trigger (`window/trigger.rs`), and any [`Contents`] (`window/contents.rs`): a user's window function, or the
//! built-in `window-aggregate`'s accumulators, which is this operator configured with its own contents.
//!
//! Tumbling and sliding windows keep their contents per slice (namespace: the slice's start); a firing combines
//! the slices of its window, so a record is never copied into `size / slide` windows. Sessions keep contents per
//! session (namespace: its id, `window/session.rs`), merged as sessions merge; a global window uses namespace 0.
//! A trigger's state (count, next continuous firing) is kept per window (namespace: its end, or a session's id).
//!
//! Timers (namespace first byte): `w` at a window's last millisecond fires it, and `w` at that plus the allowed
//! lateness purges it (one timer may do both, for two windows); `n` + the window's id is a continuous trigger's
//! intermediate firing. A record within the lateness of a fired window fires it again at once (event-time
//! triggers). Tumbling and sliding windows fired by event time — the common case — take a shorter path: a
//! batch's rows of one key and unfired slice are added as one group, a new slice sets the timer of its first
//! unfired window only, and each firing sets the next window's timer if that window shares a slice that held
//! something, and its slices' cleanup. `f` (fire) and `c` (cleanup) are the timers `window-aggregate` set before
//! it ran here: read from a savepoint, they do their half of a `w` timer.

use crate::api::batch::{event_times, key_groups, keys, set_current_key_of_row};
use crate::api::by_key::RowsByKey;
use crate::api::kind::InvalidConfig;
use crate::api::operator::{Collector, InitContext, Operator, OperatorError, ProcessContext};
use crate::api::timers::{TimeDomain, Timers};
use crate::window::assign::{TimeWindow, WindowKind, GLOBAL};
use crate::window::contents::Contents;
use crate::window::session::Sessions;
use crate::window::slicing::Slicing;
use crate::window::trigger::{Decision, Trigger, TriggerState};
use arrow_array::{Array, BinaryArray, RecordBatch, TimestampMillisecondArray, UInt16Array};
use weir_state::signature::{StateSignature, TypeSignature};
use weir_state::{KeyedStateBackend, StateId, StateKind, StateOptions};

/// The state holding each window's trigger state.
pub const TRIGGER_STATE: &str = "window-trigger";
/// The state holding each key's open sessions.
pub const SESSIONS_STATE: &str = "window-sessions";

/// Namespace byte of a window's own timer (firing at its end, purging after its lateness).
const WINDOW_TIMER: u8 = b'w';
/// Namespace byte of a continuous trigger's intermediate timer.
const CONTINUOUS_TIMER: u8 = b'n';
/// Namespace of the firing timers `window-aggregate` set before it ran on this operator.
const OLD_FIRE_TIMER: &[u8] = b"f";
/// Namespace of the cleanup timers `window-aggregate` set before it ran on this operator.
const OLD_CLEANUP_TIMER: &[u8] = b"c";

/// The namespace of the continuous timer of the window with trigger id `id`.
fn continuous_ns(id: i64) -> [u8; 9] {
    let mut ns = [CONTINUOUS_TIMER; 9];
    ns[1..].copy_from_slice(&id.to_be_bytes());
    ns
}

fn unregistered() -> OperatorError {
    OperatorError::Misuse("window operator used before initialize_state".into())
}

/// The current key's open sessions from `state`, read into `reuse` (a list kept from key to key, so a read
/// allocates nothing once warm).
fn read_sessions(
    b: &mut dyn KeyedStateBackend,
    state: StateId,
    mut reuse: Sessions,
) -> Result<Sessions, OperatorError> {
    match b.get_value(state)? {
        None => reuse.0.clear(),
        Some(bytes) if reuse.decode_from(bytes) => {}
        Some(bytes) => {
            return Err(OperatorError::UnreadableState(format!(
                "window operator: stored sessions of {} bytes are malformed",
                bytes.len()
            )))
        }
    }
    Ok(reuse)
}

/// Stores the current key's open sessions in `state` (none: the row goes), encoded into `bytes`.
fn write_sessions(
    b: &mut dyn KeyedStateBackend,
    state: StateId,
    sessions: &Sessions,
    bytes: &mut Vec<u8>,
) -> Result<(), OperatorError> {
    if sessions.0.is_empty() {
        b.delete_value(state)?;
    } else {
        sessions.encode(bytes);
        b.put_value(state, bytes)?;
    }
    Ok(())
}

/// Makes the key of row `i` the backend's current key and copies it into `key` (kept for the rows the window
/// emits).
fn set_row_key(
    keyed: &mut dyn KeyedStateBackend,
    keys: &BinaryArray,
    groups: Option<&UInt16Array>,
    i: usize,
    key: &mut Vec<u8>,
) {
    set_current_key_of_row(keyed, keys, groups, i);
    key.clear();
    key.extend_from_slice(keys.value(i));
}

/// The tag of a window operator's side output of late records.
pub const LATE_TAG: &str = "late";

/// The counters of late records dropped and sent to the side output, for the operator of `ctx`.
fn late_counters(ctx: &InitContext<'_>) -> (metrics::Counter, metrics::Counter) {
    let labels = [
        ("job_id", ctx.info.job_id.clone()),
        ("operator", ctx.info.uid.clone()),
        ("subtask", ctx.info.subtask.0.to_string()),
    ];
    (
        metrics::counter!("weir_window_late_records_dropped_total", &labels),
        metrics::counter!("weir_window_late_records_side_output_total", &labels),
    )
}

/// Rows `rows` of `batch` came too late for every window: counted, and sent on side output [`LATE_TAG`] as they
/// arrived (`side`) or dropped.
fn late_records(
    batch: &RecordBatch,
    rows: &[u32],
    side: bool,
    dropped: &metrics::Counter,
    sent: &metrics::Counter,
    out: &mut Collector<'_>,
) -> Result<(), OperatorError> {
    if rows.is_empty() {
        return Ok(());
    }
    if !side {
        dropped.increment(rows.len() as u64);
        return Ok(());
    }
    sent.increment(rows.len() as u64);
    let late = if rows.len() == batch.num_rows() {
        batch.clone()
    } else {
        let indices = arrow_array::UInt32Array::from(rows.to_vec());
        arrow_select::take::take_record_batch(batch, &indices)
            .map_err(|e| OperatorError::Records(format!("late records: {e}")))?
    };
    out.emit_side(LATE_TAG, late)
}

/// Whether an event-time window timer at `at` still does something for a key's open sessions `open`: one of
/// them ends, or ends its allowed lateness `lateness`, then.
fn window_timer_needed(open: &Sessions, at: i64, lateness: i64) -> bool {
    open.0.iter().any(|s| {
        let last = s.window.max_timestamp();
        last == at || last.saturating_add(lateness) == at
    })
}

/// A window shape and trigger that cannot go together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WindowingError {
    /// A global window fired by event or processing time, which never comes.
    #[error("a global window never ends: fire it with a count or continuous trigger")]
    GlobalNeverEnds,
    /// Sliding windows asked to purge.
    #[error("sliding windows share slices, so a firing cannot purge one window's contents")]
    SlidingPurge,
}

impl From<WindowingError> for InvalidConfig {
    fn from(e: WindowingError) -> Self {
        InvalidConfig(e.to_string())
    }
}

/// Why windows of this shape cannot have this setup.
pub fn check_windowing(kind: WindowKind, trigger: Trigger, purge: bool) -> Result<(), WindowingError> {
    match (kind, trigger) {
        (WindowKind::Global, Trigger::EventTime | Trigger::ProcessingTime) => {
            return Err(WindowingError::GlobalNeverEnds)
        }
        (WindowKind::Sliding { .. }, _) if purge => return Err(WindowingError::SlidingPurge),
        _ => {}
    }
    Ok(())
}

/// A keyed window operator over contents `C` (see the module docs).
pub struct WindowOperator<C: Contents> {
    kind: WindowKind,
    slicing: Option<Slicing>,
    trigger: Trigger,
    lateness: i64,
    /// Empty a window's contents when it fires (Flink's `PurgingTrigger`; a global count window).
    purge: bool,
    contents: C,
    trigger_state: Option<StateId>,
    sessions_state: Option<StateId>,
    /// The open sessions of the key at hand (a list reused from record to record).
    open: Sessions,
    late_dropped: metrics::Counter,
    /// Late records go to side output `late` instead of being dropped.
    late_side: bool,
    late_sent: metrics::Counter,
    /// Tumbling or sliding windows fired by event time: the shorter path of the module docs.
    chained: bool,
    /// Scratch: the key at hand, stored bytes, the rows of a batch too late for every window.
    key: Vec<u8>,
    bytes: Vec<u8>,
    late_rows: Vec<u32>,
    /// The batch's rows grouped by key and unfired slice (the shorter path).
    by_key: RowsByKey,
}

impl<C: Contents> WindowOperator<C> {
    /// Windows of `kind` fired by `trigger`, `lateness` ms of allowed lateness, contents `contents`; `purge`
    /// empties a window when it fires. Fails for combinations [`check_windowing`] refuses.
    pub fn new(
        kind: WindowKind,
        trigger: Trigger,
        lateness: i64,
        purge: bool,
        contents: C,
    ) -> Result<Self, WindowingError> {
        check_windowing(kind, trigger, purge)?;
        let slicing = Slicing::new(kind, lateness);
        Ok(WindowOperator {
            kind,
            slicing,
            trigger,
            lateness,
            purge,
            contents,
            trigger_state: None,
            sessions_state: None,
            open: Sessions::default(),
            late_dropped: metrics::Counter::noop(),
            late_side: false,
            late_sent: metrics::Counter::noop(),
            chained: slicing.is_some() && matches!(trigger, Trigger::EventTime),
            key: Vec::new(),
            bytes: Vec::new(),
            late_rows: Vec::new(),
            by_key: RowsByKey::default(),
        })
    }

    /// Sends records too late for every window to side output [`LATE_TAG`] (Flink's `sideOutputLateData`)
    /// instead of dropping them.
    pub fn with_late_side_output(mut self) -> Self {
        self.late_side = true;
        self
    }

    /// The states and timers of such an operator keyed by `K`, for its kind's signature.
    pub fn signature<K: TypeSignature>(kind: WindowKind, trigger: Trigger) -> StateSignature {
        let mut s = C::sign(StateSignature::keyed::<K>());
        if trigger.keeps_state() {
            s = s.value::<Vec<u8>>(TRIGGER_STATE).in_namespace::<i64>(TRIGGER_STATE);
        }
        if matches!(kind, WindowKind::Session { .. }) {
            s = s.value::<Vec<u8>>(SESSIONS_STATE);
        }
        s.timers::<Vec<u8>>()
    }

    fn set_window_timer(&mut self, t: &mut Timers<'_>, domain: TimeDomain, at: i64) -> Result<(), OperatorError> {
        t.keyed().set_current_namespace(&[WINDOW_TIMER]);
        match domain {
            TimeDomain::EventTime => t.register_event_time_timer(at),
            TimeDomain::ProcessingTime => t.register_processing_time_timer(at),
        }
    }

    fn delete_window_timer(&mut self, t: &mut Timers<'_>, domain: TimeDomain, at: i64) -> Result<(), OperatorError> {
        t.keyed().set_current_namespace(&[WINDOW_TIMER]);
        match domain {
            TimeDomain::EventTime => t.delete_event_time_timer(at),
            TimeDomain::ProcessingTime => t.delete_processing_time_timer(at),
        }
    }

    fn read_trigger(&mut self, b: &mut dyn KeyedStateBackend, id: i64) -> Result<TriggerState, OperatorError> {
        let Some(state) = self.trigger_state else { return Ok(TriggerState::default()) };
        b.set_current_namespace(&id.to_be_bytes());
        match b.get_value(state)? {
            None => Ok(TriggerState::default()),
            Some(bytes) => TriggerState::decode(bytes).ok_or_else(|| {
                OperatorError::UnreadableState(format!(
                    "window operator: a stored trigger state of {} bytes is malformed",
                    bytes.len()
                ))
            }),
        }
    }

    fn write_trigger(&mut self, b: &mut dyn KeyedStateBackend, id: i64, s: &TriggerState) -> Result<(), OperatorError> {
        let Some(state) = self.trigger_state else { return Ok(()) };
        b.set_current_namespace(&id.to_be_bytes());
        if s.is_empty() {
            b.delete_value(state)?;
        } else {
            b.put_value(state, &s.encode())?;
        }
        Ok(())
    }

    /// Carries out a trigger's decision for window `window` (trigger id `id`, contents `parts`).
    fn act(
        &mut self,
        t: &mut Timers<'_>,
        d: Decision,
        window: TimeWindow,
        id: i64,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        if d.window_timer {
            self.set_window_timer(t, TimeDomain::EventTime, window.max_timestamp())?;
        }
        if d.processing_timer {
            self.set_window_timer(t, TimeDomain::ProcessingTime, window.max_timestamp())?;
        }
        if let Some(at) = d.continuous_timer {
            let ns = continuous_ns(id);
            t.keyed().set_current_namespace(&ns);
            t.register_event_time_timer(at)?;
        }
        if d.fire {
            self.fire(t, window, id, out)?;
        }
        Ok(())
    }

    /// Emits window `window` (trigger id `id`) of the current key, and empties it if the operator purges.
    fn fire(
        &mut self,
        t: &mut Timers<'_>,
        window: TimeWindow,
        id: i64,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let b = t.keyed();
        match (self.slicing, self.kind) {
            (Some(sl), _) => {
                self.contents.fire(b, &self.key, window, &mut sl.slices(window.end), out)?;
                if self.purge {
                    for slice in sl.slices(window.end) {
                        self.contents.clear(b, slice)?;
                    }
                }
            }
            _ => {
                self.contents.fire(b, &self.key, window, &mut std::iter::once(id), out)?;
                if self.purge {
                    self.contents.clear(b, id)?;
                }
            }
        }
        Ok(())
    }

    /// A record of row `row` at `ts` for the current key: false if it is too late for every window.
    fn add(
        &mut self,
        t: &mut Timers<'_>,
        batch: &RecordBatch,
        row: usize,
        ts: i64,
        out: &mut Collector<'_>,
    ) -> Result<bool, OperatorError> {
        let watermark = t.current_watermark();
        match (self.slicing, self.kind) {
            (Some(sl), _) if self.chained => self.add_chained(t, &sl, batch, row, ts, out),
            (Some(sl), _) => {
                let slice = sl.slice_start(ts);
                if sl.is_late(slice, watermark) {
                    return Ok(false);
                }
                let new = self.contents.add(t.keyed(), slice, batch, row)?;
                for end in sl.ends(slice) {
                    let window = TimeWindow { start: end - sl.size(), end };
                    if window.max_timestamp() + self.lateness <= watermark {
                        continue;
                    }
                    let mut state = self.read_trigger(t.keyed(), end)?;
                    let before = state;
                    let mut d = self.trigger.on_element(window.max_timestamp(), ts, watermark, &mut state);
                    if state != before {
                        self.write_trigger(t.keyed(), end, &state)?;
                    }
                    // The window's event-time timers exist unless this slice is new (they are set per window, not
                    // per record). A processing-time one is set again per record, as Flink does: once fired, a
                    // window's next record fires it again on the clock.
                    d.window_timer &= new;
                    if new {
                        // The purge timer (the window timer itself without lateness).
                        self.set_window_timer(t, TimeDomain::EventTime, window.max_timestamp() + self.lateness)?;
                    }
                    self.act(t, d, window, end, out)?;
                }
                Ok(true)
            }
            (None, WindowKind::Session { gap }) => self.add_session(t, gap, batch, row, ts, out),
            _ => {
                let new = self.contents.add(t.keyed(), 0, batch, row)?;
                let mut state = self.read_trigger(t.keyed(), 0)?;
                let mut d = self.trigger.on_element(GLOBAL.max_timestamp(), ts, watermark, &mut state);
                self.write_trigger(t.keyed(), 0, &state)?;
                // A continuous trigger's end is the end of input (the final watermark); set once, not per record.
                d.window_timer &= new;
                self.act(t, d, GLOBAL, 0, out)?;
                Ok(true)
            }
        }
    }

    /// Sets the current key's window timer at `at` (event time).
    fn set_event_timer(t: &mut Timers<'_>, at: i64) -> Result<(), OperatorError> {
        t.keyed().set_current_namespace(&[WINDOW_TIMER]);
        t.register_event_time_timer(at)
    }

    /// A new slice at `slice` of the current key (the shorter path): its first unfired window's timer; later
    /// windows' timers follow from each firing.
    fn slice_created(t: &mut Timers<'_>, sl: &Slicing, slice: i64) -> Result<(), OperatorError> {
        match sl.next_unfired(slice, t.current_watermark()) {
            Some(end) => Self::set_event_timer(t, end - 1),
            None => Ok(()),
        }
    }

    /// A record of row `row` at `ts` for the current key, on the shorter path (tumbling or sliding windows fired
    /// by event time) — a row whose slice some window has fired, or any row of a batch nothing was grouped of:
    /// false if it is too late for every window.
    fn add_chained(
        &mut self,
        t: &mut Timers<'_>,
        sl: &Slicing,
        batch: &RecordBatch,
        row: usize,
        ts: i64,
        out: &mut Collector<'_>,
    ) -> Result<bool, OperatorError> {
        let watermark = t.current_watermark();
        let slice = sl.slice_start(ts);
        if sl.is_late(slice, watermark) {
            return Ok(false);
        }
        if self.contents.add(t.keyed(), slice, batch, row)? {
            Self::slice_created(t, sl, slice)?;
        }
        if sl.first_end(slice) - 1 <= watermark {
            self.contents.add_to_fired(t.keyed(), sl, slice, batch, row)?;
        }
        // Within the allowed lateness: windows that fired already fire again, updated.
        for end in sl.refire(slice, watermark) {
            let window = TimeWindow { start: end - sl.size(), end };
            self.contents.fire(t.keyed(), &self.key, window, &mut sl.slices(end), out)?;
            if let Some(at) = sl.cleanup_at(end) {
                Self::set_event_timer(t, at)?;
            }
        }
        Ok(true)
    }

    /// Adds the batch's rows of unfired slices, grouped by key and slice (the shorter path): each group is one
    /// call, so an accumulator is read and written once per group. The rows left are marked ungrouped.
    fn add_groups(
        &mut self,
        t: &mut Timers<'_>,
        sl: &Slicing,
        batch: &RecordBatch,
        times: &TimestampMillisecondArray,
        key_col: &BinaryArray,
        groups: Option<&UInt16Array>,
    ) -> Result<(), OperatorError> {
        let watermark = t.current_watermark();
        let contents = &self.contents;
        self.by_key.group(key_col, |i| {
            if !times.is_valid(i) || contents.ignores(batch, i) {
                return None;
            }
            let slice = sl.slice_start(times.value(i));
            (sl.first_end(slice) - 1 > watermark).then_some(slice)
        });
        for g in 0..self.by_key.len() {
            let rows = self.by_key.rows(g);
            set_row_key(t.keyed(), key_col, groups, rows[0] as usize, &mut self.key);
            let slice = self.by_key.part(g);
            if self.contents.add_rows(t.keyed(), slice, batch, rows)? {
                Self::slice_created(t, sl, slice)?;
            }
        }
        Ok(())
    }

    /// The current key's event-time window timer at `timestamp` on the shorter path: fires the window ending
    /// right after it (`fire`) and drops the slices of the one whose lateness it ends (`purge`).
    fn on_chained_timer(
        &mut self,
        t: &mut Timers<'_>,
        sl: &Slicing,
        timestamp: i64,
        fire: bool,
        purge: bool,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let end = timestamp.saturating_add(1);
        if fire && sl.is_end(end) {
            if let Some(continues) = self.contents.fire_slices(t.keyed(), &self.key, sl, end, out)? {
                if continues {
                    Self::set_event_timer(t, sl.next_end(end) - 1)?;
                }
                match sl.cleanup_at(end) {
                    Some(at) => Self::set_event_timer(t, at)?,
                    None => {
                        for slice in sl.last_in(end) {
                            self.contents.clear(t.keyed(), slice)?;
                        }
                    }
                }
            }
        }
        let cleaned = sl.cleaned_end(timestamp);
        if purge && self.lateness > 0 && sl.is_end(cleaned) {
            for slice in sl.last_in(cleaned) {
                self.contents.clear(t.keyed(), slice)?;
            }
        }
        Ok(())
    }

    fn read_sessions(&mut self, b: &mut dyn KeyedStateBackend) -> Result<Sessions, OperatorError> {
        let state = self.sessions_state.ok_or_else(unregistered)?;
        read_sessions(b, state, std::mem::take(&mut self.open))
    }

    fn write_sessions(&mut self, b: &mut dyn KeyedStateBackend, sessions: Sessions) -> Result<(), OperatorError> {
        let state = self.sessions_state.ok_or_else(unregistered)?;
        write_sessions(b, state, &sessions, &mut self.bytes)?;
        self.open = sessions;
        Ok(())
    }

    /// Deletes the timers of session window `window` (trigger id `id`, trigger state `state`) that only it
    /// uses: it merged away or grew. Its event-time window timers (its end, its end plus the lateness) are shared
    /// by time with the key's other sessions (`open`, after the merge): one goes unless a session still ends, or
    /// ends its lateness, then.
    fn drop_session_timers(
        &mut self,
        t: &mut Timers<'_>,
        window: TimeWindow,
        id: i64,
        state: &TriggerState,
        open: &Sessions,
    ) -> Result<(), OperatorError> {
        let last = window.max_timestamp();
        let ends = [Some(last), (self.lateness > 0).then_some(last.saturating_add(self.lateness))];
        for at in ends.into_iter().flatten() {
            if !window_timer_needed(open, at, self.lateness) {
                self.delete_window_timer(t, TimeDomain::EventTime, at)?;
            }
        }
        if matches!(self.trigger, Trigger::ProcessingTime) {
            self.delete_window_timer(t, TimeDomain::ProcessingTime, window.max_timestamp())?;
        }
        if let Some(at) = state.fire_at.filter(|at| *at < window.max_timestamp()) {
            let ns = continuous_ns(id);
            t.keyed().set_current_namespace(&ns);
            t.delete_event_time_timer(at)?;
        }
        Ok(())
    }

    fn add_session(
        &mut self,
        t: &mut Timers<'_>,
        gap: i64,
        batch: &RecordBatch,
        row: usize,
        ts: i64,
        out: &mut Collector<'_>,
    ) -> Result<bool, OperatorError> {
        let watermark = t.current_watermark();
        let mut sessions = self.read_sessions(t.keyed())?;
        let window = TimeWindow { start: ts, end: ts.saturating_add(gap) };
        if sessions.cover(window).max_timestamp() + self.lateness <= watermark {
            self.open = sessions;
            return Ok(false);
        }
        let before = sessions.0.iter().find(|s| s.window.intersects(&window)).copied();
        let merged = sessions.add(window);
        let session = merged.session;
        let mut state = self.read_trigger(t.keyed(), session.id)?;
        if before.is_some_and(|b| b.window != session.window) || !merged.absorbed.is_empty() {
            // The session grew: its old timers and those of the sessions it absorbed go, their contents and
            // trigger states fold into it, and its trigger's timers are set for the merged window.
            let mut states = vec![state];
            if let Some(old) = before.filter(|b| b.id == session.id) {
                self.drop_session_timers(t, old.window, old.id, &state, &sessions)?;
            }
            for gone in &merged.absorbed {
                let s = self.read_trigger(t.keyed(), gone.id)?;
                self.drop_session_timers(t, gone.window, gone.id, &s, &sessions)?;
                self.write_trigger(t.keyed(), gone.id, &TriggerState::default())?;
                self.contents.merge(t.keyed(), gone.id, session.id)?;
                states.push(s);
            }
            let (m, timer) = self.trigger.merge(session.window.max_timestamp(), &states);
            state = m;
            if let Some(at) = timer {
                let ns = continuous_ns(session.id);
                t.keyed().set_current_namespace(&ns);
                t.register_event_time_timer(at)?;
            }
        }
        let new =
            self.contents.add(t.keyed(), session.id, batch, row)? || before.is_none_or(|b| b.window != session.window);
        self.write_sessions(t.keyed(), sessions)?;
        let mut d = self.trigger.on_element(session.window.max_timestamp(), ts, watermark, &mut state);
        self.write_trigger(t.keyed(), session.id, &state)?;
        d.window_timer &= new;
        if new {
            self.set_window_timer(t, TimeDomain::EventTime, session.window.max_timestamp() + self.lateness)?;
        }
        self.act(t, d, session.window, session.id, out)?;
        Ok(true)
    }

    /// Purges window `window` (trigger id `id`): contents no later window needs, trigger state, its timers.
    fn purge(&mut self, t: &mut Timers<'_>, window: TimeWindow, id: i64) -> Result<(), OperatorError> {
        let state = self.read_trigger(t.keyed(), id)?;
        if let Some(at) = state.fire_at.filter(|at| *at < window.max_timestamp()) {
            let ns = continuous_ns(id);
            t.keyed().set_current_namespace(&ns);
            t.delete_event_time_timer(at)?;
        }
        self.write_trigger(t.keyed(), id, &TriggerState::default())?;
        if matches!(self.trigger, Trigger::ProcessingTime) {
            self.delete_window_timer(t, TimeDomain::ProcessingTime, window.max_timestamp())?;
        }
        match (self.slicing, self.kind) {
            (Some(sl), _) => {
                for slice in sl.last_in(window.end) {
                    self.contents.clear(t.keyed(), slice)?;
                }
            }
            (None, WindowKind::Session { .. }) => {
                let mut sessions = self.read_sessions(t.keyed())?;
                self.contents.clear(t.keyed(), id)?;
                sessions.remove(id);
                self.write_sessions(t.keyed(), sessions)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// The current key's window ending at `end` with its trigger id, if there is one.
    fn window_ending_at(&mut self, t: &mut Timers<'_>, end: i64) -> Result<Option<(TimeWindow, i64)>, OperatorError> {
        Ok(match (self.slicing, self.kind) {
            (Some(sl), _) => sl.is_end(end).then_some((TimeWindow { start: end - sl.size(), end }, end)),
            (None, WindowKind::Session { .. }) => {
                let sessions = self.read_sessions(t.keyed())?;
                let found = sessions.ending_at(end).map(|s| (s.window, s.id));
                self.open = sessions;
                found
            }
            _ => (end == GLOBAL.end).then_some((GLOBAL, 0)),
        })
    }

    /// The current key's window with trigger id `id`.
    fn window_of(&mut self, t: &mut Timers<'_>, id: i64) -> Result<Option<TimeWindow>, OperatorError> {
        Ok(match (self.slicing, self.kind) {
            (Some(sl), _) => Some(TimeWindow { start: id - sl.size(), end: id }),
            (None, WindowKind::Session { .. }) => {
                let sessions = self.read_sessions(t.keyed())?;
                let found = sessions.0.iter().find(|s| s.id == id).map(|s| s.window);
                self.open = sessions;
                found
            }
            _ => Some(GLOBAL),
        })
    }

    fn flush(&mut self, out: &mut Collector<'_>) -> Result<(), OperatorError> {
        self.contents.flush(out)
    }
}

impl<C: Contents + 'static> Operator for WindowOperator<C> {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        let keyed =
            ctx.keyed.as_mut().ok_or_else(|| OperatorError::Misuse("a window operator needs keyed state".into()))?;
        self.contents.register(&mut **keyed)?;
        if self.trigger.keeps_state() {
            self.trigger_state = Some(keyed.register_state_with_options(
                TRIGGER_STATE,
                StateKind::Value,
                &StateOptions::default().namespaced(),
            )?);
        }
        if matches!(self.kind, WindowKind::Session { .. }) {
            self.sessions_state = Some(keyed.register_state(SESSIONS_STATE, StateKind::Value)?);
        }
        (self.late_dropped, self.late_sent) = late_counters(ctx);
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: &RecordBatch,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let key_col = keys(batch)?;
        let groups = key_groups(batch);
        let times = event_times(batch);
        self.contents.begin_batch(batch)?;
        let mut t = ctx.timers()?;
        self.late_rows.clear();
        self.by_key.clear();
        if let (Some(sl), true, Some(times)) = (self.slicing, self.chained, times) {
            self.add_groups(&mut t, &sl, batch, times, key_col, groups)?;
        }
        for i in 0..batch.num_rows() {
            if self.by_key.group_of(i).is_some() || self.contents.ignores(batch, i) {
                continue;
            }
            let ts = match times {
                Some(times) if times.is_valid(i) => times.value(i),
                // Global windows counted by records need no time; the others do.
                _ if matches!((self.kind, self.trigger), (WindowKind::Global, Trigger::Count(_))) => i64::MIN,
                _ => {
                    return Err(OperatorError::Misuse(
                        "a window operator needs event time: a record has no timestamp".into(),
                    ))
                }
            };
            set_row_key(t.keyed(), key_col, groups, i, &mut self.key);
            if !self.add(&mut t, batch, i, ts, out)? {
                self.late_rows.push(i as u32);
            }
        }
        late_records(batch, &self.late_rows, self.late_side, &self.late_dropped, &self.late_sent, out)?;
        self.flush(out)
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        domain: TimeDomain,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let mut t = ctx.timers()?;
        let (key, ns) = t.keyed().current_key_and_namespace();
        self.key.clear();
        self.key.extend_from_slice(key);
        // What a window timer does: fire the window ending after it, purge the one whose lateness it ends.
        let (continuous, fire, purge) = match ns {
            [WINDOW_TIMER] => (None, true, true),
            OLD_FIRE_TIMER => (None, true, false),
            OLD_CLEANUP_TIMER => (None, false, true),
            [CONTINUOUS_TIMER, a, b, c, d, e, f, g, h] => {
                (Some(i64::from_be_bytes([*a, *b, *c, *d, *e, *f, *g, *h])), false, false)
            }
            other => {
                return Err(OperatorError::Misuse(format!("window operator: a timer in unknown namespace {other:?}")))
            }
        };
        match (domain, continuous) {
            (TimeDomain::EventTime, None) if self.chained => {
                if let Some(sl) = self.slicing {
                    self.on_chained_timer(&mut t, &sl, timestamp, fire, purge, out)?;
                }
            }
            (TimeDomain::EventTime, Some(id)) => {
                if let Some(window) = self.window_of(&mut t, id)? {
                    let mut state = self.read_trigger(t.keyed(), id)?;
                    let watermark = t.current_watermark();
                    let d = self.trigger.on_continuous_timer(window.max_timestamp(), timestamp, watermark, &mut state);
                    self.write_trigger(t.keyed(), id, &state)?;
                    self.act(&mut t, d, window, id, out)?;
                }
            }
            (TimeDomain::EventTime, None) => {
                // One timer may end one window and purge another (or, without lateness, both the same one).
                let end = timestamp.saturating_add(1);
                if fire && self.trigger.fires_at_end() {
                    if let Some((window, id)) = self.window_ending_at(&mut t, end)? {
                        let d = self.trigger.on_window_timer();
                        self.act(&mut t, d, window, id, out)?;
                    }
                }
                if purge {
                    if let Some((window, id)) = self.window_ending_at(&mut t, end - self.lateness)? {
                        self.purge(&mut t, window, id)?;
                    }
                }
            }
            (TimeDomain::ProcessingTime, _) => {
                if let Some((window, id)) = self.window_ending_at(&mut t, timestamp.saturating_add(1))? {
                    let d = self.trigger.on_processing_timer();
                    self.act(&mut t, d, window, id, out)?;
                }
                // No watermark follows the clock's timers: what they emitted goes now.
                return self.flush(out);
            }
        }
        // The rows event-time timers emit go out together at the watermark that fired them (`on_watermark`),
        // not a batch per timer.
        Ok(())
    }

    fn on_watermark(
        &mut self,
        _watermark: i64,
        _ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        self.flush(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::session::Session;

    #[test]
    fn a_session_timer_is_needed_while_a_session_ends_or_ends_its_lateness_then() {
        let session = |start, end, id| Session { window: TimeWindow { start, end }, id };
        let open = Sessions(vec![session(0, 10, 1), session(20, 30, 2)]);
        // Ends at 9 and 29; with 11 ms of lateness they are purged at 20 and 40.
        for (at, needed) in [(9, true), (29, true), (20, true), (40, true), (19, false), (30, false)] {
            assert_eq!(window_timer_needed(&open, at, 11), needed, "{at}");
        }
        assert!(!window_timer_needed(&open, 20, 0), "without lateness only the ends");
        assert!(!window_timer_needed(&Sessions::default(), 9, 0));
    }
}
