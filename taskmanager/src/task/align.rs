//! Barrier alignment for a task with several input channels: after barrier `n` arrives on a channel, that
//! channel is blocked until `n` arrived on every channel (a channel that delivered end of input counts as
//! aligned); then the task snapshots and all channels are released.
//!
//! A barrier newer than the one being aligned aborts that alignment, as Flink's barrier handler does: the
//! older checkpoint can no longer complete at this task (some producer skipped it), so the task declines it,
//! releases the channels it had blocked and aligns the newer one instead. Frames held back on a channel are
//! processed in their arrival order before any later frame of that channel (see [`Deferred`]).

use std::collections::VecDeque;
use weir_common::ids::CheckpointId;

/// What a barrier or an end of input means for the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alignment {
    /// Stale barrier (a checkpoint aligned, aborted or superseded before): ignore it.
    Ignore,
    /// Still waiting for other channels; the channel that delivered it is blocked.
    Waiting,
    /// Every channel delivered the barrier: snapshot checkpoint `id` now.
    Aligned(CheckpointId),
}

/// What a barrier means for the task: maybe the abort of an older alignment, and where alignment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarrierOutcome {
    /// The older checkpoint whose alignment this barrier aborted: the task declines it.
    pub aborted: Option<CheckpointId>,
    /// Where alignment stands after the barrier.
    pub alignment: Alignment,
}

impl BarrierOutcome {
    fn plain(alignment: Alignment) -> Self {
        BarrierOutcome { aborted: None, alignment }
    }
}

/// Tracks which channels delivered the barrier being aligned.
#[derive(Debug, Clone)]
pub struct BarrierAligner {
    pending: Option<CheckpointId>,
    arrived: Vec<bool>,
    ended: Vec<bool>,
    /// The newest checkpoint whose barrier was seen (aligned, aborted or pending): barriers up to it that do
    /// not belong to the pending one are stale.
    newest: Option<CheckpointId>,
}

impl BarrierAligner {
    /// An aligner for `channels` input channels.
    pub fn new(channels: usize) -> Self {
        BarrierAligner { pending: None, arrived: vec![false; channels], ended: vec![false; channels], newest: None }
    }

    /// Whether frames of `channel` must wait (it delivered the barrier being aligned).
    pub fn is_blocked(&self, channel: usize) -> bool {
        self.pending.is_some() && self.arrived[channel]
    }

    /// The checkpoint being aligned, if any.
    pub fn pending(&self) -> Option<CheckpointId> {
        self.pending
    }

    /// Whether every channel delivered end of input.
    pub fn all_ended(&self) -> bool {
        self.ended.iter().all(|&e| e)
    }

    /// Barrier `id` arrived on `channel`.
    pub fn on_barrier(&mut self, channel: usize, id: CheckpointId) -> BarrierOutcome {
        if self.pending == Some(id) {
            self.arrived[channel] = true;
            return BarrierOutcome::plain(self.check());
        }
        if self.newest.is_some_and(|n| id <= n) {
            return BarrierOutcome::plain(Alignment::Ignore);
        }
        // A checkpoint newer than any seen: it supersedes the one being aligned, if any.
        let aborted = self.pending.take();
        self.pending = Some(id);
        self.newest = Some(id);
        self.arrived.iter_mut().for_each(|a| *a = false);
        self.arrived[channel] = true;
        BarrierOutcome { aborted, alignment: self.check() }
    }

    /// End of input arrived on `channel`.
    pub fn on_end_of_input(&mut self, channel: usize) -> Alignment {
        self.ended[channel] = true;
        if self.pending.is_some() {
            self.check()
        } else {
            Alignment::Ignore
        }
    }

    fn check(&mut self) -> Alignment {
        let done = self.arrived.iter().zip(&self.ended).all(|(&a, &e)| a || e);
        match (done, self.pending) {
            (true, Some(id)) => {
                self.pending = None;
                self.arrived.iter_mut().for_each(|a| *a = false);
                Alignment::Aligned(id)
            }
            _ => Alignment::Waiting,
        }
    }
}

/// Frames held back per input channel, in arrival order: those of a blocked channel, and those that arrive
/// on a released channel while older held frames of it still wait. A channel's frames are therefore always
/// processed in the order they arrived, whichever alignment (completed or aborted) released them.
#[derive(Debug)]
pub struct Deferred<F> {
    queues: Vec<VecDeque<F>>,
    held: usize,
}

impl<F> Deferred<F> {
    /// Empty queues for `channels` channels.
    pub fn new(channels: usize) -> Self {
        Deferred { queues: (0..channels).map(|_| VecDeque::new()).collect(), held: 0 }
    }

    /// Whether a frame that just arrived on `channel` must be held: the channel is blocked, or older frames
    /// of it are still held.
    pub fn must_hold(&self, aligner: &BarrierAligner, channel: usize) -> bool {
        aligner.is_blocked(channel) || (self.held > 0 && !self.queues[channel].is_empty())
    }

    /// Holds a frame of `channel` after those already held.
    pub fn hold(&mut self, channel: usize, frame: F) {
        self.queues[channel].push_back(frame);
        self.held += 1;
    }

    /// The oldest held frame of a channel that is not blocked (any more), to be processed next.
    pub fn next_released(&mut self, aligner: &BarrierAligner) -> Option<(usize, F)> {
        if self.held == 0 {
            return None;
        }
        let c = (0..self.queues.len()).find(|&c| !self.queues[c].is_empty() && !aligner.is_blocked(c))?;
        let frame = self.queues[c].pop_front()?;
        self.held -= 1;
        Some((c, frame))
    }

    /// Frames held in all.
    pub fn len(&self) -> usize {
        self.held
    }

    /// Whether no frame is held.
    pub fn is_empty(&self) -> bool {
        self.held == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(a: Alignment) -> BarrierOutcome {
        BarrierOutcome { aborted: None, alignment: a }
    }

    #[test]
    fn single_channel_aligns_at_once() {
        let mut a = BarrierAligner::new(1);
        assert_eq!(a.on_barrier(0, CheckpointId(1)), plain(Alignment::Aligned(CheckpointId(1))));
        assert!(!a.is_blocked(0));
        assert_eq!(a.on_barrier(0, CheckpointId(1)), plain(Alignment::Ignore));
    }

    #[test]
    fn blocks_until_all_channels_delivered() {
        let mut a = BarrierAligner::new(3);
        assert_eq!(a.on_barrier(1, CheckpointId(5)), plain(Alignment::Waiting));
        assert!(a.is_blocked(1) && !a.is_blocked(0));
        assert_eq!(a.on_barrier(0, CheckpointId(5)), plain(Alignment::Waiting));
        assert_eq!(a.on_barrier(2, CheckpointId(5)), plain(Alignment::Aligned(CheckpointId(5))));
        assert!(!a.is_blocked(0) && !a.is_blocked(1) && !a.is_blocked(2));
        assert_eq!(a.on_barrier(0, CheckpointId(6)), plain(Alignment::Waiting));
    }

    #[test]
    fn a_newer_barrier_aborts_the_alignment_and_aligns_the_newer_one() {
        let mut a = BarrierAligner::new(3);
        assert_eq!(a.on_barrier(0, CheckpointId(5)), plain(Alignment::Waiting));
        // Channel 1 skipped 5 (its producer never saw that checkpoint): 5 can no longer align here.
        assert_eq!(
            a.on_barrier(1, CheckpointId(6)),
            BarrierOutcome { aborted: Some(CheckpointId(5)), alignment: Alignment::Waiting }
        );
        assert_eq!(a.pending(), Some(CheckpointId(6)));
        assert!(!a.is_blocked(0), "the channel blocked for the aborted checkpoint is released");
        assert!(a.is_blocked(1), "the channel that delivered the newer barrier is blocked");
        // The aborted checkpoint's barrier arriving late is stale and blocks nothing.
        assert_eq!(a.on_barrier(2, CheckpointId(5)), plain(Alignment::Ignore));
        assert!(!a.is_blocked(2));
        assert_eq!(a.on_barrier(0, CheckpointId(6)), plain(Alignment::Waiting));
        assert_eq!(a.on_barrier(2, CheckpointId(6)), plain(Alignment::Aligned(CheckpointId(6))));
        assert_eq!(a.on_barrier(1, CheckpointId(5)), plain(Alignment::Ignore));
        assert_eq!(a.on_barrier(1, CheckpointId(6)), plain(Alignment::Ignore));
    }

    #[test]
    fn a_newer_barrier_can_align_at_once_when_the_others_ended() {
        let mut a = BarrierAligner::new(3);
        assert_eq!(a.on_end_of_input(2), Alignment::Ignore);
        assert_eq!(a.on_barrier(0, CheckpointId(5)), plain(Alignment::Waiting));
        assert_eq!(a.on_end_of_input(0), Alignment::Waiting);
        assert_eq!(
            a.on_barrier(1, CheckpointId(7)),
            BarrierOutcome { aborted: Some(CheckpointId(5)), alignment: Alignment::Aligned(CheckpointId(7)) }
        );
        assert_eq!(a.pending(), None);
    }

    #[test]
    fn ended_channels_count_as_aligned() {
        let mut a = BarrierAligner::new(2);
        assert_eq!(a.on_barrier(0, CheckpointId(3)), plain(Alignment::Waiting));
        assert_eq!(a.on_end_of_input(1), Alignment::Aligned(CheckpointId(3)));
        assert_eq!(a.on_end_of_input(0), Alignment::Ignore);
        assert!(a.all_ended());
        // A late barrier on the ended channel for an aligned checkpoint is stale.
        assert_eq!(a.on_barrier(1, CheckpointId(3)), plain(Alignment::Ignore));
        // Ended channels that still carry barriers (final checkpoints) align normally.
        assert_eq!(a.on_barrier(1, CheckpointId(4)), plain(Alignment::Aligned(CheckpointId(4))));
    }

    /// What a consumer loop saw, in processing order.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum F {
        Data(&'static str),
        Barrier(u64),
    }

    /// Drives an aligner and its held frames as the task's consumer loop does: held frames of released
    /// channels first, then the next arrival. Returns the frames in processing order, the checkpoints
    /// aligned and the ones aborted.
    fn drive(channels: usize, arrivals: &[(usize, F)]) -> (Vec<(usize, F)>, Vec<u64>, Vec<u64>) {
        let mut a = BarrierAligner::new(channels);
        let mut d = Deferred::new(channels);
        let (mut processed, mut aligned, mut aborted) = (Vec::new(), Vec::new(), Vec::new());
        let mut process = |a: &mut BarrierAligner, c: usize, f: F| {
            if let F::Barrier(id) = f {
                let o = a.on_barrier(c, CheckpointId(id));
                aborted.extend(o.aborted.map(|id| id.0));
                if let Alignment::Aligned(id) = o.alignment {
                    aligned.push(id.0);
                }
            }
            processed.push((c, f));
        };
        let mut next = arrivals.iter().cloned();
        loop {
            if let Some((c, f)) = d.next_released(&a) {
                process(&mut a, c, f);
                continue;
            }
            let Some((c, f)) = next.next() else { break };
            if d.must_hold(&a, c) {
                d.hold(c, f);
            } else {
                process(&mut a, c, f);
            }
        }
        assert!(d.is_empty(), "frames still held at the end: {}", d.len());
        (processed, aligned, aborted)
    }

    fn of(processed: &[(usize, F)], channel: usize) -> Vec<F> {
        processed.iter().filter(|(c, _)| *c == channel).map(|(_, f)| f.clone()).collect()
    }

    #[test]
    fn frames_held_for_an_aborted_alignment_are_processed_in_order_and_the_newer_one_blocks_again() {
        use F::*;
        let arrivals = vec![
            (0, Barrier(5)),
            (0, Data("a1")),
            (0, Data("a2")),
            (0, Barrier(6)),
            (0, Data("a3")),
            (1, Data("b1")),
            // Channel 1 skipped 5: aborts it; channel 0's held frames run up to its barrier 6, then it blocks.
            (1, Barrier(6)),
            (1, Data("b2")),
            (0, Data("a4")),
            (2, Data("c1")),
            (2, Barrier(5)),
            (2, Data("c2")),
            (2, Barrier(6)),
            (2, Data("c3")),
        ];
        let (processed, aligned, aborted) = drive(3, &arrivals);
        assert_eq!(aborted, vec![5]);
        assert_eq!(aligned, vec![6]);
        // Per channel, nothing is reordered or lost.
        for c in 0..3 {
            let sent: Vec<F> = arrivals.iter().filter(|(ch, _)| *ch == c).map(|(_, f)| f.clone()).collect();
            assert_eq!(of(&processed, c), sent, "channel {c}");
        }
        // Exactly-once for checkpoint 6: everything before a channel's barrier 6 is processed before 6 aligns,
        // and nothing after it.
        let at = processed.iter().position(|(c, f)| *c == 2 && *f == Barrier(6)).unwrap();
        let before: Vec<&(usize, F)> = processed[..at].iter().collect();
        for pre in [(0, Data("a2")), (1, Data("b1")), (2, Data("c2"))] {
            assert!(before.contains(&&pre), "{pre:?} precedes the alignment of 6");
        }
        for post in [(0, Data("a3")), (0, Data("a4")), (1, Data("b2")), (2, Data("c3"))] {
            assert!(!before.contains(&&post), "{post:?} follows the alignment of 6");
        }
    }

    #[test]
    fn frames_arriving_on_a_released_channel_wait_behind_its_held_ones() {
        let mut a = BarrierAligner::new(2);
        let mut d = Deferred::new(2);
        a.on_barrier(0, CheckpointId(1));
        assert!(d.must_hold(&a, 0));
        d.hold(0, "x");
        d.hold(0, "y");
        assert_eq!(a.on_barrier(1, CheckpointId(1)).alignment, Alignment::Aligned(CheckpointId(1)));
        // Released, but "x" and "y" are not processed yet: a newer frame of channel 0 waits behind them.
        assert!(d.must_hold(&a, 0));
        assert!(!d.must_hold(&a, 1));
        d.hold(0, "z");
        let order: Vec<_> = std::iter::from_fn(|| d.next_released(&a)).collect();
        assert_eq!(order, vec![(0, "x"), (0, "y"), (0, "z")]);
        assert!(!d.must_hold(&a, 0));
    }
}
