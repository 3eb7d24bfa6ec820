//! Barrier alignment for a task with several input channels: after barrier `n` arrives on a channel, that
//! channel is blocked until `n` arrived on every channel (a channel that delivered end of input counts as
//! aligned); then the task snapshots and all channels are released.

/// What a barrier or an end of input means for the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alignment {
    /// Stale barrier (an older checkpoint): ignore it.
    Ignore,
    /// Still waiting for other channels; the channel that delivered it is blocked.
    Waiting,
    /// Every channel delivered the barrier: snapshot checkpoint `id` now.
    Aligned(u64),
}

/// An error in the order of barriers.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("barrier {got} arrived on channel {channel} while aligning checkpoint {pending}")]
pub struct AlignmentError {
    /// Channel.
    pub channel: usize,
    /// Barrier received.
    pub got: u64,
    /// Checkpoint being aligned.
    pub pending: u64,
}

/// Tracks which channels delivered the barrier being aligned.
#[derive(Debug, Clone)]
pub struct BarrierAligner {
    pending: Option<u64>,
    arrived: Vec<bool>,
    ended: Vec<bool>,
    last_aligned: Option<u64>,
}

impl BarrierAligner {
    /// An aligner for `channels` input channels.
    pub fn new(channels: usize) -> Self {
        BarrierAligner {
            pending: None,
            arrived: vec![false; channels],
            ended: vec![false; channels],
            last_aligned: None,
        }
    }

    /// Whether frames of `channel` must wait (it delivered the barrier being aligned).
    pub fn is_blocked(&self, channel: usize) -> bool {
        self.pending.is_some() && self.arrived[channel]
    }

    /// Whether every channel delivered end of input.
    pub fn all_ended(&self) -> bool {
        self.ended.iter().all(|&e| e)
    }

    /// Barrier `id` arrived on `channel`.
    pub fn on_barrier(&mut self, channel: usize, id: u64) -> Result<Alignment, AlignmentError> {
        if self.last_aligned.is_some_and(|last| id <= last) {
            return Ok(Alignment::Ignore);
        }
        match self.pending {
            None => {
                self.pending = Some(id);
                self.arrived.iter_mut().for_each(|a| *a = false);
            }
            Some(p) if p == id => {}
            Some(p) => return Err(AlignmentError { channel, got: id, pending: p }),
        }
        self.arrived[channel] = true;
        Ok(self.check())
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
                self.last_aligned = Some(id);
                self.arrived.iter_mut().for_each(|a| *a = false);
                Alignment::Aligned(id)
            }
            _ => Alignment::Waiting,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_channel_aligns_at_once() {
        let mut a = BarrierAligner::new(1);
        assert_eq!(a.on_barrier(0, 1), Ok(Alignment::Aligned(1)));
        assert!(!a.is_blocked(0));
        assert_eq!(a.on_barrier(0, 1), Ok(Alignment::Ignore));
    }

    #[test]
    fn blocks_until_all_channels_delivered() {
        let mut a = BarrierAligner::new(3);
        assert_eq!(a.on_barrier(1, 5), Ok(Alignment::Waiting));
        assert!(a.is_blocked(1) && !a.is_blocked(0));
        assert_eq!(a.on_barrier(0, 5), Ok(Alignment::Waiting));
        assert_eq!(a.on_barrier(2, 5), Ok(Alignment::Aligned(5)));
        assert!(!a.is_blocked(0) && !a.is_blocked(1) && !a.is_blocked(2));
        assert_eq!(a.on_barrier(0, 6), Ok(Alignment::Waiting));
        assert!(a.on_barrier(1, 7).is_err());
    }

    #[test]
    fn ended_channels_count_as_aligned() {
        let mut a = BarrierAligner::new(2);
        assert_eq!(a.on_barrier(0, 3), Ok(Alignment::Waiting));
        assert_eq!(a.on_end_of_input(1), Alignment::Aligned(3));
        assert_eq!(a.on_end_of_input(0), Alignment::Ignore);
        assert!(a.all_ended());
        // A late barrier on the ended channel for an aligned checkpoint is stale.
        assert_eq!(a.on_barrier(1, 3), Ok(Alignment::Ignore));
        // Ended channels that still carry barriers (final checkpoints) align normally.
        assert_eq!(a.on_barrier(1, 4), Ok(Alignment::Aligned(4)));
    }
}
