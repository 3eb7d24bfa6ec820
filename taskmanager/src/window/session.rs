//! A key's session windows (Flink's `MergingWindowSet` for `EventTimeSessionWindows`): each record opens
//! `[ts, ts + gap)`, which merges with every session it touches. A session's accumulator stays under the
//! namespace it was first stored under (its *state id*) while it grows, so a merge moves only the absorbed
//! sessions' accumulators. Pure bookkeeping: the window operator stores the list as one value per key.

use crate::window::assign::TimeWindow;

/// One open session: its window and the namespace of its accumulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    /// The session's extent.
    pub window: TimeWindow,
    /// The namespace its state is kept under.
    pub id: i64,
}

/// What adding a record's window did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    /// The session the record belongs to now.
    pub session: Session,
    /// Its end before, if it existed and its end changed (its timer moves).
    pub old_end: Option<i64>,
    /// Sessions merged into it: their accumulators fold into its own, their timers go.
    pub absorbed: Vec<Session>,
}

/// A key's open sessions, by start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sessions(pub Vec<Session>);

impl Sessions {
    /// The sessions stored as `bytes` (24 bytes each: start, end, id, little-endian), or `None` if they are not.
    pub fn decode(bytes: &[u8]) -> Option<Sessions> {
        let mut s = Sessions::default();
        s.decode_from(bytes).then_some(s)
    }

    /// Replaces the sessions by those stored as `bytes`, reusing the list's room (a record's read allocates
    /// nothing once warm); false, leaving none, if the bytes are not sessions.
    pub fn decode_from(&mut self, bytes: &[u8]) -> bool {
        self.0.clear();
        if !bytes.len().is_multiple_of(24) {
            return false;
        }
        let word = |c: &[u8], i: usize| i64::from_le_bytes(c[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        self.0.extend(
            bytes
                .chunks_exact(24)
                .map(|c| Session { window: TimeWindow { start: word(c, 0), end: word(c, 1) }, id: word(c, 2) }),
        );
        true
    }

    /// The stored bytes, into `out` (cleared first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        for s in &self.0 {
            for w in [s.window.start, s.window.end, s.id] {
                out.extend_from_slice(&w.to_le_bytes());
            }
        }
    }

    /// The window a record opening `window` would end up in (before adding it).
    pub fn cover(&self, window: TimeWindow) -> TimeWindow {
        self.0.iter().filter(|s| s.window.intersects(&window)).fold(window, |w, s| w.cover(&s.window))
    }

    /// Adds a record's `window`: merges it with every session it touches. The earliest of those keeps its state
    /// id; a new session takes its start as id.
    pub fn add(&mut self, window: TimeWindow) -> Merged {
        // The list is sorted by start, so the first session it touches is the earliest; only a merge of more
        // than one allocates (`absorbed`).
        let (mut cover, mut first, mut absorbed) = (window, None::<Session>, Vec::new());
        self.0.retain(|s| {
            if !s.window.intersects(&window) {
                return true;
            }
            cover = cover.cover(&s.window);
            match first {
                None => first = Some(*s),
                Some(_) => absorbed.push(*s),
            }
            false
        });
        let (id, old_end) = match first {
            Some(first) => (first.id, Some(first.window.end).filter(|e| *e != cover.end)),
            None => (window.start, None),
        };
        let session = Session { window: cover, id };
        let at = self.0.partition_point(|s| s.window.start < cover.start);
        self.0.insert(at, session);
        Merged { session, old_end, absorbed }
    }

    /// The session ending at `end`, if any (sessions of a key never share an end).
    pub fn ending_at(&self, end: i64) -> Option<Session> {
        self.0.iter().copied().find(|s| s.window.end == end)
    }

    /// Removes the session with state id `id`.
    pub fn remove(&mut self, id: i64) {
        self.0.retain(|s| s.id != id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::assign::merge_windows;
    use proptest::prelude::*;

    fn w(start: i64, end: i64) -> TimeWindow {
        TimeWindow { start, end }
    }

    #[test]
    fn a_record_between_two_sessions_joins_them() {
        let mut s = Sessions::default();
        assert_eq!(s.add(w(0, 10)).session, Session { window: w(0, 10), id: 0 });
        assert_eq!(s.add(w(30, 40)).session.id, 30);
        let m = s.add(w(5, 15));
        assert_eq!((m.session, m.old_end, m.absorbed.len()), (Session { window: w(0, 15), id: 0 }, Some(10), 0));
        // Touching counts: [15, 30) meets [0, 15) and [30, 40).
        let m = s.add(w(15, 30));
        assert_eq!(m.session, Session { window: w(0, 40), id: 0 });
        assert_eq!(m.absorbed, [Session { window: w(30, 40), id: 30 }]);
        assert_eq!(s.0.len(), 1);
        let mut bytes = Vec::new();
        s.encode(&mut bytes);
        assert_eq!(Sessions::decode(&bytes), Some(s.clone()));
        assert_eq!(Sessions::decode(&bytes[1..]), None);
        assert_eq!(s.ending_at(40).map(|x| x.id), Some(0));
        s.remove(0);
        assert!(s.0.is_empty());
    }

    proptest! {
        /// Adding windows one by one leaves the sessions that merging them all at once gives, each session's
        /// id the start of its earliest record that opened it.
        #[test]
        fn incremental_merging_matches_merging_all_at_once(starts in proptest::collection::vec(0i64..500, 1..40), gap in 1i64..30) {
            let mut s = Sessions::default();
            let windows: Vec<TimeWindow> = starts.iter().map(|t| w(*t, t + gap)).collect();
            for x in &windows {
                let cover = s.cover(*x);
                let m = s.add(*x);
                prop_assert_eq!(m.session.window, cover);
                prop_assert!(s.0.windows(2).all(|p| p[0].window.end < p[1].window.start), "disjoint and sorted");
            }
            let want: Vec<TimeWindow> = merge_windows(windows).into_iter().map(|(c, _)| c).collect();
            prop_assert_eq!(s.0.iter().map(|x| x.window).collect::<Vec<_>>(), want);
        }
    }
}
