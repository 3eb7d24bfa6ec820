//! When a window fires: Flink's `EventTimeTrigger`, `ProcessingTimeTrigger`, `CountTrigger` and
//! `ContinuousEventTimeTrigger` as pure decisions over a window's trigger state. The window operator
//! (`window/operator.rs`) keeps the state (a count, the next continuous firing) per window and sets the timers a
//! decision asks for.
//!
//! Timers: the window's own timer at its last millisecond (`window timer`, shared with its cleanup when there
//! is no allowed lateness, so a window fires before it is purged) and, for continuous triggers, an intermediate
//! timer per window. A continuous firing that falls on the window's end is left to the window timer, so the end
//! fires once (Flink gets the same by both timers being one).

use crate::window::config::WindowTrigger;

/// A trigger (the spec's [`WindowTrigger`] with its parameters as event-time arithmetic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Fires when the watermark passes the window's end, and at once for a record of a window that already fired
    /// (within the allowed lateness).
    EventTime,
    /// Fires when the processing-time clock passes the window's end.
    ProcessingTime,
    /// Fires every `n` records of the window.
    Count(u64),
    /// Fires every `interval` ms of event time, on multiples of it, and at the window's end.
    ContinuousEventTime(i64),
}

impl From<WindowTrigger> for Trigger {
    fn from(t: WindowTrigger) -> Self {
        match t {
            WindowTrigger::EventTime => Trigger::EventTime,
            WindowTrigger::ProcessingTime => Trigger::ProcessingTime,
            WindowTrigger::Count(n) => Trigger::Count(n),
            WindowTrigger::ContinuousEventTime(i) => Trigger::ContinuousEventTime(i.min(i64::MAX as u64) as i64),
        }
    }
}

/// A window's trigger state: what count and continuous triggers remember between records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TriggerState {
    /// Records since the last count firing.
    pub count: u64,
    /// The next continuous firing.
    pub fire_at: Option<i64>,
}

/// Bytes of a stored [`TriggerState`].
pub const TRIGGER_STATE_BYTES: usize = 17;

impl TriggerState {
    /// Whether there is nothing to keep (the stored row can go).
    pub fn is_empty(&self) -> bool {
        self.count == 0 && self.fire_at.is_none()
    }

    /// The stored form: count, a flag and the firing time.
    pub fn encode(&self) -> [u8; TRIGGER_STATE_BYTES] {
        let mut b = [0u8; TRIGGER_STATE_BYTES];
        b[..8].copy_from_slice(&self.count.to_be_bytes());
        if let Some(t) = self.fire_at {
            b[8] = 1;
            b[9..].copy_from_slice(&t.to_be_bytes());
        }
        b
    }

    /// Reads a stored state; `None` if the bytes are not one.
    pub fn decode(bytes: &[u8]) -> Option<TriggerState> {
        let b: &[u8; TRIGGER_STATE_BYTES] = bytes.try_into().ok()?;
        let count = u64::from_be_bytes(b[..8].try_into().ok()?);
        let fire_at = match b[8] {
            0 => None,
            1 => Some(i64::from_be_bytes(b[9..].try_into().ok()?)),
            _ => return None,
        };
        Some(TriggerState { count, fire_at })
    }
}

/// What a trigger asks of the window operator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Decision {
    /// Emit the window now.
    pub fire: bool,
    /// Set the window's event-time timer (at its last millisecond).
    pub window_timer: bool,
    /// Set the window's processing-time timer (at its last millisecond).
    pub processing_timer: bool,
    /// Set the window's intermediate continuous timer at this time.
    pub continuous_timer: Option<i64>,
}

impl Trigger {
    /// Whether windows keep a [`TriggerState`].
    pub fn keeps_state(&self) -> bool {
        matches!(self, Trigger::Count(_) | Trigger::ContinuousEventTime(_))
    }

    /// Whether the window's event-time timer at its last millisecond fires it.
    pub fn fires_at_end(&self) -> bool {
        matches!(self, Trigger::EventTime | Trigger::ContinuousEventTime(_))
    }

    /// A record at `timestamp` joined the window whose last millisecond is `window_max` at `watermark`.
    pub fn on_element(&self, window_max: i64, timestamp: i64, watermark: i64, state: &mut TriggerState) -> Decision {
        match *self {
            Trigger::EventTime if window_max <= watermark => Decision { fire: true, ..Decision::default() },
            Trigger::EventTime => Decision { window_timer: true, ..Decision::default() },
            Trigger::ProcessingTime => Decision { processing_timer: true, ..Decision::default() },
            Trigger::Count(n) => {
                state.count += 1;
                if state.count >= n {
                    state.count = 0;
                    return Decision { fire: true, ..Decision::default() };
                }
                Decision::default()
            }
            Trigger::ContinuousEventTime(_) if window_max <= watermark => {
                Decision { fire: true, ..Decision::default() }
            }
            Trigger::ContinuousEventTime(interval) => {
                let mut d = Decision { window_timer: true, ..Decision::default() };
                if state.fire_at.is_none() {
                    let next = (timestamp - timestamp.rem_euclid(interval)).saturating_add(interval);
                    d.continuous_timer = Self::next_fire(next, window_max, state);
                }
                d
            }
        }
    }

    /// The window timer of the window whose last millisecond is `window_max` fired (event time).
    pub fn on_window_timer(&self) -> Decision {
        Decision { fire: self.fires_at_end(), ..Decision::default() }
    }

    /// The intermediate continuous timer at `time` of the window ending at `window_max` fired at `watermark`.
    /// The next firing is the first interval boundary past the watermark: boundaries it already passed would
    /// fire the same contents again (Flink fires each of them; at the end of input, a global window's chain of
    /// boundaries would never end).
    pub fn on_continuous_timer(
        &self,
        window_max: i64,
        time: i64,
        watermark: i64,
        state: &mut TriggerState,
    ) -> Decision {
        match *self {
            Trigger::ContinuousEventTime(interval) if state.fire_at == Some(time) => {
                let steps =
                    if watermark < time { 1 } else { (watermark as i128 - time as i128) / interval as i128 + 1 };
                let next = (time as i128 + steps * interval as i128).min(i64::MAX as i128) as i64;
                Decision {
                    fire: true,
                    continuous_timer: Self::next_fire(next, window_max, state),
                    ..Decision::default()
                }
            }
            _ => Decision::default(),
        }
    }

    /// The processing-time timer of a window fired.
    pub fn on_processing_timer(&self) -> Decision {
        Decision { fire: matches!(self, Trigger::ProcessingTime), ..Decision::default() }
    }

    /// The trigger state of windows merged into one (sessions): counts add up, the earliest continuous firing
    /// stays (its timer is set again, for the merged window).
    pub fn merge(&self, window_max: i64, states: &[TriggerState]) -> (TriggerState, Option<i64>) {
        let mut merged = TriggerState {
            count: states.iter().map(|s| s.count).sum(),
            fire_at: states.iter().filter_map(|s| s.fire_at).min(),
        };
        let timer = merged.fire_at.and_then(|t| Self::next_fire(t, window_max, &mut merged));
        (merged, timer)
    }

    /// Records the next continuous firing (no later than the window's end); the timer to set for it, unless the
    /// window timer covers it.
    fn next_fire(at: i64, window_max: i64, state: &mut TriggerState) -> Option<i64> {
        let at = at.min(window_max);
        state.fire_at = Some(at);
        (at < window_max).then_some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn event_time_fires_at_the_end_and_at_once_when_late() {
        let mut s = TriggerState::default();
        let t = Trigger::EventTime;
        assert_eq!(t.on_element(99, 5, 50, &mut s), Decision { window_timer: true, ..Decision::default() });
        assert!(t.on_element(99, 5, 99, &mut s).fire, "a record of a fired window within the lateness");
        assert!(t.on_window_timer().fire);
        assert!(!t.on_processing_timer().fire);
        assert!(!t.keeps_state() && s.is_empty());
    }

    #[test]
    fn processing_time_fires_on_the_clock_only() {
        let mut s = TriggerState::default();
        let t = Trigger::ProcessingTime;
        assert_eq!(t.on_element(99, 5, 200, &mut s), Decision { processing_timer: true, ..Decision::default() });
        assert!(t.on_processing_timer().fire);
        assert!(!t.on_window_timer().fire, "the watermark does not fire it (its timer only cleans up)");
    }

    #[test]
    fn count_fires_every_n_records_and_merges_by_adding() {
        let t = Trigger::Count(3);
        let mut s = TriggerState::default();
        let fired: Vec<bool> = (0..7).map(|i| t.on_element(99, i, i64::MIN, &mut s).fire).collect();
        assert_eq!(fired, [false, false, true, false, false, true, false]);
        assert_eq!(s.count, 1);
        assert!(!t.on_window_timer().fire && !t.on_processing_timer().fire);
        let (m, timer) =
            t.merge(99, &[TriggerState { count: 1, fire_at: None }, TriggerState { count: 1, fire_at: None }]);
        assert_eq!((m.count, timer), (2, None));
    }

    #[test]
    fn continuous_fires_on_interval_multiples_then_at_the_end() {
        let t = Trigger::ContinuousEventTime(10);
        let mut s = TriggerState::default();
        // Window [0, 35): the first record at 3 asks for a firing at 10.
        let d = t.on_element(34, 3, i64::MIN, &mut s);
        assert_eq!(d, Decision { window_timer: true, continuous_timer: Some(10), ..Decision::default() });
        // Later records do not move it.
        assert_eq!(t.on_element(34, 12, i64::MIN, &mut s).continuous_timer, None);
        assert_eq!(
            t.on_continuous_timer(34, 10, 10, &mut s),
            Decision { fire: true, continuous_timer: Some(20), ..Decision::default() }
        );
        assert_eq!(t.on_continuous_timer(34, 20, 20, &mut s).continuous_timer, Some(30));
        // The firing at 40 would pass the end: the window timer at 34 fires it, once.
        let d = t.on_continuous_timer(34, 30, 30, &mut s);
        assert_eq!((d.fire, d.continuous_timer, s.fire_at), (true, None, Some(34)));
        assert!(t.on_window_timer().fire);
        // A stale timer (the state moved on) does nothing.
        assert_eq!(t.on_continuous_timer(34, 20, 20, &mut s), Decision::default());
        // A watermark that jumped past several boundaries fires once, then at the first boundary after it.
        let mut s = TriggerState { count: 0, fire_at: Some(10) };
        assert_eq!(t.on_continuous_timer(1_000, 10, 45, &mut s).continuous_timer, Some(50));
        // The end of input on a global window: one firing, then its end.
        let mut s = TriggerState { count: 0, fire_at: Some(10) };
        let d = t.on_continuous_timer(i64::MAX - 1, 10, i64::MAX, &mut s);
        assert_eq!((d.fire, d.continuous_timer, s.fire_at), (true, None, Some(i64::MAX - 1)));
        // Merged sessions keep the earliest pending firing.
        let (m, timer) =
            t.merge(50, &[TriggerState { count: 0, fire_at: Some(30) }, TriggerState { count: 0, fire_at: Some(20) }]);
        assert_eq!((m.fire_at, timer), (Some(20), Some(20)));
    }

    proptest! {
        #[test]
        fn trigger_states_round_trip(count in any::<u64>(), fire_at in proptest::option::of(any::<i64>())) {
            let s = TriggerState { count, fire_at };
            prop_assert_eq!(TriggerState::decode(&s.encode()), Some(s));
        }

        /// A continuous trigger fires a window once per interval boundary it spans after its first record, then
        /// at its end, however the watermark advances (the firings a watermark passes are all due).
        #[test]
        fn continuous_firings_are_the_interval_boundaries(first in 0i64..100, len in 1i64..200, interval in 1i64..40, jump in 1i64..50) {
            let t = Trigger::ContinuousEventTime(interval);
            let max = first + len;
            let mut s = TriggerState::default();
            let mut timers = std::collections::BTreeSet::new();
            let d = t.on_element(max, first, i64::MIN, &mut s);
            timers.extend(d.continuous_timer);
            // The watermark advances by `jump`: every firing a watermark passes is due at once.
            let (mut fired, mut wm) = (Vec::new(), first);
            let mut want = Vec::new();
            let mut boundaries = (0..).map(|i| first - first % interval + interval + i * interval).take_while(|b| *b < max).peekable();
            while wm < max + jump {
                while let Some(at) = timers.first().copied().filter(|at| *at <= wm) {
                    timers.remove(&at);
                    let d = t.on_continuous_timer(max, at, wm, &mut s);
                    if d.fire { fired.push(wm); }
                    timers.extend(d.continuous_timer);
                }
                // Once per watermark that passed at least one boundary.
                let mut passed = false;
                while boundaries.next_if(|b| *b <= wm).is_some() { passed = true; }
                if passed { want.push(wm); }
                wm += jump;
            }
            prop_assert_eq!(fired, want);
        }
    }
}
