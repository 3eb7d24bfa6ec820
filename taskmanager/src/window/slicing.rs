//! The decisions of tumbling and sliding windows kept as slices (panes of `gcd(size, slide)`, Flink SQL's
//! slicing windows): a record updates the one slice holding it; the window ending at `E` is the combination of
//! its `size / pane` slices, fired once by a timer at `E − 1`; a slice is dropped once the last window holding it
//! has fired and its allowed lateness has passed. Pure arithmetic: the window operator calls it per record and
//! per timer.
//!
//! Which windows fire, per key: a new slice sets a timer for the first window holding it that has not fired;
//! when window `E` fires and one of its slices is also in window `E + slide`, that window's timer is set. So
//! every window holding a slice fires exactly once (again, for a late record within the allowed lateness), and
//! no timer is set per record or per window a record belongs to.

use crate::window::assign::{gcd, window_start, WindowKind};

/// Tumbling or sliding windows as slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slicing {
    size: i64,
    slide: i64,
    pane: i64,
    offset: i64,
    end_offset: i64,
    lateness: i64,
}

impl Slicing {
    /// The slicing of tumbling or sliding windows with `lateness` ms of allowed lateness (`None` for sessions).
    pub fn new(kind: WindowKind, lateness: i64) -> Option<Slicing> {
        let (size, slide, offset) = match kind {
            WindowKind::Tumbling { size, offset } => (size, size, offset),
            WindowKind::Sliding { size, slide, offset } => (size, slide, offset),
            WindowKind::Session { .. } | WindowKind::Global => return None,
        };
        // Windows start on the slide grid shifted by `offset`, so they end on it shifted by `offset + size`.
        Some(Slicing {
            size,
            slide,
            pane: gcd(size, slide),
            offset,
            end_offset: (offset + size).rem_euclid(slide),
            lateness,
        })
    }

    /// The window length, ms.
    pub fn size(&self) -> i64 {
        self.size
    }

    /// The start of the slice holding `timestamp`.
    pub fn slice_start(&self, timestamp: i64) -> i64 {
        window_start(timestamp, self.offset, self.pane)
    }

    /// The end of the first window holding the slice starting at `slice`.
    pub fn first_end(&self, slice: i64) -> i64 {
        window_start(slice + self.pane - 1, self.end_offset, self.slide) + self.slide
    }

    /// The end of the last window holding the slice starting at `slice`.
    pub fn last_end(&self, slice: i64) -> i64 {
        window_start(slice + self.size, self.end_offset, self.slide)
    }

    /// Whether a record in the slice starting at `slice` is too late for every window holding it at watermark
    /// `watermark` (Flink: the window's last timestamp plus the allowed lateness is at or behind the watermark).
    pub fn is_late(&self, slice: i64, watermark: i64) -> bool {
        self.last_end(slice) - 1 + self.lateness <= watermark
    }

    /// Ends of the windows holding the slice at `slice` that have fired at `watermark` but are still within
    /// their allowed lateness: a late record in the slice fires them again, at once.
    pub fn refire(&self, slice: i64, watermark: i64) -> impl Iterator<Item = i64> + '_ {
        let (first, last) = (self.first_end(slice), self.last_end(slice));
        (0..)
            .map(move |i| first + i * self.slide)
            .take_while(move |e| *e <= last && *e - 1 <= watermark)
            .filter(move |e| *e - 1 + self.lateness > watermark)
    }

    /// The end of the first window holding the slice at `slice` that has not fired at `watermark`: its timer is
    /// set when the slice is created. `None` if every one has.
    pub fn next_unfired(&self, slice: i64, watermark: i64) -> Option<i64> {
        let (first, last) = (self.first_end(slice), self.last_end(slice));
        // The first window end past `watermark + 1`, on the slide grid: E − 1 > watermark. (Compared first, so
        // that a watermark near `i64::MIN` never reaches the grid arithmetic.)
        let e = if watermark < first - 1 {
            first
        } else {
            first.max(window_start(watermark + 1, self.end_offset, self.slide) + self.slide)
        };
        (e <= last).then_some(e)
    }

    /// Starts of the slices of the window ending at `end`, in time order.
    pub fn slices(&self, end: i64) -> impl Iterator<Item = i64> {
        let (start, pane) = (end - self.size, self.pane);
        (0..self.size / pane).map(move |i| start + i * pane)
    }

    /// Ends of the windows holding the slice at `slice`, earliest first.
    pub fn ends(&self, slice: i64) -> impl Iterator<Item = i64> {
        let (first, last, slide) = (self.first_end(slice), self.last_end(slice), self.slide);
        (0..).map(move |i| first + i * slide).take_while(move |e| *e <= last)
    }

    /// Whether a window ends at `end` (it is on the slide grid).
    pub fn is_end(&self, end: i64) -> bool {
        (end - self.end_offset).rem_euclid(self.slide) == 0
    }

    /// The end of the window after the one ending at `end`.
    pub fn next_end(&self, end: i64) -> i64 {
        end + self.slide
    }

    /// After the window ending at `end` fired: whether its slice at `slice` is also in the next window (then
    /// that window's timer must be set).
    pub fn in_next_window(&self, slice: i64, end: i64) -> bool {
        self.last_end(slice) > end
    }

    /// When the slices whose last window ends at `end` are dropped: at once when it fires (`None`, no
    /// allowed lateness), else by a cleanup timer at this time.
    pub fn cleanup_at(&self, end: i64) -> Option<i64> {
        (self.lateness > 0).then_some(end - 1 + self.lateness)
    }

    /// The window end a cleanup timer at `time` belongs to.
    pub fn cleaned_end(&self, time: i64) -> i64 {
        time + 1 - self.lateness
    }

    /// Starts of the slices whose first window ends at `end`: what it adds to the window before it.
    pub fn first_in(&self, end: i64) -> impl Iterator<Item = i64> {
        let (start, pane) = (end - self.slide, self.pane);
        (0..self.slide / pane).map(move |i| start + i * pane)
    }

    /// Starts of the slices whose last window ends at `end`: dropped once it is done with.
    pub fn last_in(&self, end: i64) -> impl Iterator<Item = i64> {
        let (start, pane) = (end - self.size, self.pane);
        (0..self.slide / pane).map(move |i| start + i * pane)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kinds() -> impl Strategy<Value = WindowKind> {
        prop_oneof![
            (1i64..50, 0i64..50).prop_map(|(size, o)| WindowKind::Tumbling { size, offset: o % size }),
            (1i64..12, 1i64..6, 0i64..50).prop_map(|(k, slide, o)| {
                let size = slide * k + (o % 3) * (slide / 2).max(1) * (k > 1) as i64;
                let size = size.max(slide);
                WindowKind::Sliding { size, slide, offset: o % slide }
            }),
        ]
    }

    #[test]
    fn a_sliding_window_is_its_slices() {
        let s = Slicing::new(WindowKind::Sliding { size: 10, slide: 4, offset: 0 }, 0).unwrap();
        // Slices of gcd(10, 4) = 2; windows start every 4 ms, so they end at 2 mod 4.
        assert_eq!(s.slice_start(5), 4);
        assert_eq!((s.first_end(4), s.last_end(4)), (6, 14));
        assert_eq!(s.slices(14).collect::<Vec<_>>(), [4, 6, 8, 10, 12]);
        assert_eq!(s.last_in(14).collect::<Vec<_>>(), [4, 6]);
        assert!(s.in_next_window(4, 6) && !s.in_next_window(4, 14));
        assert_eq!(s.next_unfired(4, 4), Some(6), "window [−4, 6) has not fired at watermark 4");
        assert_eq!(s.next_unfired(4, 5), Some(10), "at 5 it has");
        assert_eq!(s.next_unfired(4, 13), None);
        assert_eq!(s.next_unfired(4, i64::MIN), Some(6), "before any watermark");
        assert!(!s.is_late(4, 12) && s.is_late(4, 13));
        let lax = Slicing::new(WindowKind::Sliding { size: 10, slide: 4, offset: 0 }, 5).unwrap();
        assert_eq!(lax.refire(4, 13).collect::<Vec<_>>(), [10, 14]);
        assert_eq!(lax.refire(4, 14).collect::<Vec<_>>(), [14], "window 10 is past its lateness");
        assert_eq!(lax.cleanup_at(14), Some(18));
        assert_eq!(lax.cleaned_end(18), 14);
        assert_eq!(s.cleanup_at(14), None);
    }

    proptest! {
        /// The windows a slice feeds — from its first to its last window end — are exactly the windows of every
        /// timestamp in it, and a window's slices hold exactly its timestamps.
        #[test]
        fn slices_feed_exactly_the_windows_of_their_timestamps(kind in kinds(), ts in -200i64..200) {
            let s = Slicing::new(kind, 0).unwrap();
            let slice = s.slice_start(ts);
            let (first, last) = (s.first_end(slice), s.last_end(slice));
            let slide = match kind { WindowKind::Sliding { slide, .. } => slide, WindowKind::Tumbling { size, .. } => size, _ => unreachable!() };
            let fed: Vec<i64> = (0..).map(|i| first + i * slide).take_while(|e| *e <= last).collect();
            let mut want: Vec<i64> = kind.windows_of(ts).iter().map(|w| w.end).collect();
            want.sort();
            prop_assert_eq!(&fed, &want);
            prop_assert_eq!(s.ends(slice).collect::<Vec<_>>(), want.clone());
            prop_assert!(want.iter().all(|e| s.is_end(*e)));
            // A window ends at `ts` exactly when one holding `ts − 1` does.
            prop_assert_eq!(s.is_end(ts), kind.windows_of(ts - 1).iter().any(|w| w.end == ts));
            for e in fed {
                let slices: Vec<i64> = s.slices(e).collect();
                prop_assert!(slices.contains(&slice));
                prop_assert_eq!(slices.len() as i64 * (s.pane), s.size());
                prop_assert!(e - s.size() <= ts && ts < e);
                prop_assert_eq!(s.last_in(e).any(|x| x == slice), s.last_end(slice) == e);
                prop_assert_eq!(s.first_in(e).any(|x| x == slice), s.first_end(slice) == e);
            }
        }

        /// Late-record decisions agree with firing one window at a time: a window fires at `end − 1`.
        #[test]
        fn refire_and_next_unfired_split_the_windows_at_the_watermark(kind in kinds(), ts in -200i64..200, wm in -250i64..250, lateness in 0i64..20) {
            let s = Slicing::new(kind, lateness).unwrap();
            let slice = s.slice_start(ts);
            let windows: Vec<i64> = kind.windows_of(ts).iter().map(|w| w.end).collect();
            let mut fired_live: Vec<i64> = windows.iter().copied().filter(|e| e - 1 <= wm && e - 1 + lateness > wm).collect();
            fired_live.sort();
            prop_assert_eq!(s.refire(slice, wm).collect::<Vec<_>>(), fired_live);
            prop_assert_eq!(s.next_unfired(slice, wm), windows.iter().copied().filter(|e| e - 1 > wm).min());
            prop_assert_eq!(s.is_late(slice, wm), windows.iter().all(|e| e - 1 + lateness <= wm));
        }
    }
}
