//! Window assignment as arithmetic (Flink's `TumblingEventTimeWindows`, `SlidingEventTimeWindows`,
//! `EventTimeSessionWindows` and `TimeWindow.mergeWindows`), and the slices that sliding windows are kept in:
//! panes of `gcd(size, slide)`, so a record updates one slice and a firing combines the slices of its window.
//! Pure functions: the window operator calls them per record and per firing.

/// A window of event time: `[start, end)`, in ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimeWindow {
    /// First millisecond in the window.
    pub start: i64,
    /// First millisecond after it.
    pub end: i64,
}

impl TimeWindow {
    /// The last timestamp in the window: its event-time timer fires when the watermark reaches it.
    pub fn max_timestamp(&self) -> i64 {
        self.end - 1
    }

    /// Whether the two windows overlap or touch neither (Flink's `intersects`: `[0, 10)` and `[10, 20)` do).
    pub fn intersects(&self, other: &TimeWindow) -> bool {
        self.start <= other.end && self.end >= other.start
    }

    /// The smallest window covering both.
    pub fn cover(&self, other: &TimeWindow) -> TimeWindow {
        TimeWindow { start: self.start.min(other.start), end: self.end.max(other.end) }
    }
}

/// The start of the window of `size` (shifted by `offset`) that holds `timestamp`, for any sign of either (the
/// remainder is taken towards negative infinity, so windows before the epoch line up with those after it).
pub fn window_start(timestamp: i64, offset: i64, size: i64) -> i64 {
    debug_assert!(size > 0);
    timestamp - (timestamp - offset).rem_euclid(size)
}

/// How a keyed stream is cut into windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// Back-to-back windows of `size` ms, starting at multiples of `size` plus `offset`.
    Tumbling {
        /// Length, ms.
        size: i64,
        /// Shift from the epoch (time zones), ms, below `size`.
        offset: i64,
    },
    /// Windows of `size` ms starting every `slide` ms (plus `offset`).
    Sliding {
        /// Length, ms.
        size: i64,
        /// Distance between starts, ms.
        slide: i64,
        /// Shift from the epoch, ms, below `slide`.
        offset: i64,
    },
    /// A window per burst of records: each record opens `[ts, ts + gap)`, and windows that touch merge.
    Session {
        /// Inactivity that closes a session, ms.
        gap: i64,
    },
    /// One window per key over all time (Flink's `GlobalWindows`): only a count or continuous trigger fires it.
    Global,
}

/// The window of [`WindowKind::Global`]: all of time.
pub const GLOBAL: TimeWindow = TimeWindow { start: i64::MIN, end: i64::MAX };

/// Greatest common divisor (of positive numbers).
pub fn gcd(mut a: i64, mut b: i64) -> i64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.abs()
}

impl WindowKind {
    /// The length of the slices its state is kept in: the window for tumbling ones, `gcd(size, slide)` for
    /// sliding ones; `None` for sessions, which are merged instead.
    pub fn slice_size(&self) -> Option<i64> {
        match *self {
            WindowKind::Tumbling { size, .. } => Some(size),
            WindowKind::Sliding { size, slide, .. } => Some(gcd(size, slide)),
            WindowKind::Session { .. } | WindowKind::Global => None,
        }
    }

    /// The slice holding `timestamp` (a record updates only this one), or for a session the window it opens.
    pub fn slice_of(&self, timestamp: i64) -> TimeWindow {
        match *self {
            WindowKind::Tumbling { size, offset } => {
                let start = window_start(timestamp, offset, size);
                TimeWindow { start, end: start + size }
            }
            WindowKind::Sliding { size, slide, offset } => {
                let pane = gcd(size, slide);
                let start = window_start(timestamp, offset, pane);
                TimeWindow { start, end: start + pane }
            }
            WindowKind::Session { gap } => TimeWindow { start: timestamp, end: timestamp.saturating_add(gap) },
            WindowKind::Global => GLOBAL,
        }
    }

    /// Every window `timestamp` belongs to, latest start first (what Flink's assigners return; the operator
    /// keeps slices, and uses this only to know which windows a slice feeds).
    pub fn windows_of(&self, timestamp: i64) -> Vec<TimeWindow> {
        match *self {
            WindowKind::Tumbling { .. } | WindowKind::Session { .. } | WindowKind::Global => {
                vec![self.slice_of(timestamp)]
            }
            WindowKind::Sliding { size, slide, offset } => {
                let mut out = Vec::with_capacity((size / slide) as usize + 1);
                let mut start = window_start(timestamp, offset, slide);
                while start > timestamp - size {
                    out.push(TimeWindow { start, end: start + size });
                    start -= slide;
                }
                out
            }
        }
    }

    /// The window that ends with slice `slice` — sliding windows end on slide boundaries, so only a slice whose
    /// end is one ends a window — or `None`.
    pub fn window_ending_with(&self, slice: TimeWindow) -> Option<TimeWindow> {
        match *self {
            WindowKind::Tumbling { .. } => Some(slice),
            WindowKind::Sliding { size, slide, offset } => (window_start(slice.end, offset, slide) == slice.end)
                .then_some(TimeWindow { start: slice.end - size, end: slice.end }),
            WindowKind::Session { .. } | WindowKind::Global => None,
        }
    }

    /// The slices a window is combined from, in time order (for a sliding window `size / pane` of them).
    pub fn slices_of(&self, window: TimeWindow) -> impl Iterator<Item = TimeWindow> {
        let pane = self.slice_size().unwrap_or(window.end - window.start).max(1);
        (0..(window.end - window.start) / pane).map(move |i| {
            let start = window.start + i * pane;
            TimeWindow { start, end: start + pane }
        })
    }
}

/// Merges session windows (Flink's `TimeWindow.mergeWindows`): sorted by start, each window that intersects
/// the running cover joins it. Returns each merged window with the windows it was made of (only groups of more
/// than one window need their state merged).
pub fn merge_windows(mut windows: Vec<TimeWindow>) -> Vec<(TimeWindow, Vec<TimeWindow>)> {
    windows.sort();
    let mut merged: Vec<(TimeWindow, Vec<TimeWindow>)> = Vec::new();
    for w in windows {
        match merged.last_mut() {
            Some((cover, parts)) if cover.intersects(&w) => {
                *cover = cover.cover(&w);
                parts.push(w);
            }
            _ => merged.push((w, vec![w])),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn starts_line_up_before_and_after_the_epoch() {
        assert_eq!(window_start(0, 0, 1000), 0);
        assert_eq!(window_start(999, 0, 1000), 0);
        assert_eq!(window_start(1000, 0, 1000), 1000);
        assert_eq!(window_start(-1, 0, 1000), -1000);
        assert_eq!(window_start(-1000, 0, 1000), -1000);
        // A one-hour window in UTC+1 style offsets.
        assert_eq!(window_start(7_200_000, 3_600_000, 86_400_000), 3_600_000);
    }

    #[test]
    fn sliding_windows_and_their_slices() {
        let k = WindowKind::Sliding { size: 10_000, slide: 4_000, offset: 0 };
        assert_eq!(k.slice_size(), Some(2_000));
        let ws = k.windows_of(9_000);
        assert_eq!(
            ws,
            vec![
                TimeWindow { start: 8_000, end: 18_000 },
                TimeWindow { start: 4_000, end: 14_000 },
                TimeWindow { start: 0, end: 10_000 }
            ]
        );
        assert_eq!(k.slice_of(9_000), TimeWindow { start: 8_000, end: 10_000 });
        // Only slices ending on a slide boundary end a window.
        assert_eq!(
            k.window_ending_with(TimeWindow { start: 6_000, end: 8_000 }),
            Some(TimeWindow { start: -2_000, end: 8_000 })
        );
        assert_eq!(k.window_ending_with(TimeWindow { start: 8_000, end: 10_000 }), None);
        let slices: Vec<_> = k.slices_of(TimeWindow { start: 0, end: 10_000 }).map(|s| s.start).collect();
        assert_eq!(slices, vec![0, 2_000, 4_000, 6_000, 8_000]);
    }

    #[test]
    fn sessions_merge_when_they_touch() {
        let w = |s, e| TimeWindow { start: s, end: e };
        let merged = merge_windows(vec![w(20, 30), w(0, 10), w(10, 15), w(40, 50), w(5, 8)]);
        assert_eq!(merged.iter().map(|(c, _)| *c).collect::<Vec<_>>(), vec![w(0, 15), w(20, 30), w(40, 50)]);
        assert_eq!(merged[0].1, vec![w(0, 10), w(5, 8), w(10, 15)]);
    }

    proptest! {
        /// Every timestamp is in exactly the windows that contain it, its slice is one of the slices of each,
        /// and the slices of a window tile it.
        #[test]
        fn every_timestamp_falls_in_exactly_its_windows_and_slices(
            ts in -1_000_000_000i64..1_000_000_000,
            slide in 1i64..5_000,
            factor in 1i64..8,
            extra in 0i64..3_000,
            offset_pick in 0i64..1_000,
        ) {
            let size = slide * factor + if factor > 1 { extra % slide } else { 0 };
            let offset = offset_pick % slide;
            let k = WindowKind::Sliding { size, slide, offset };
            let windows = k.windows_of(ts);
            let expected: Vec<i64> = {
                let first = window_start(ts - size + 1, offset, slide);
                let first = if first <= ts - size { first + slide } else { first };
                let mut v: Vec<i64> = (0..).map(|i| first + i * slide).take_while(|s| *s <= ts).collect();
                v.reverse();
                v
            };
            prop_assert_eq!(windows.iter().map(|w| w.start).collect::<Vec<_>>(), expected);
            let slice = k.slice_of(ts);
            prop_assert!(slice.start <= ts && ts < slice.end);
            for w in &windows {
                prop_assert!(w.start <= ts && ts < w.end && w.end - w.start == size);
                let slices: Vec<_> = k.slices_of(*w).collect();
                prop_assert!(slices.contains(&slice));
                prop_assert_eq!(slices.first().map(|s| s.start), Some(w.start));
                prop_assert_eq!(slices.last().map(|s| s.end), Some(w.end));
            }
            let t = WindowKind::Tumbling { size, offset: offset % size };
            let tw = t.slice_of(ts);
            prop_assert!(tw.start <= ts && ts < tw.end && tw.end - tw.start == size);
        }
    }
}
