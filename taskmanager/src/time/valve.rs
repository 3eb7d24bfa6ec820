//! Combining the watermarks and statuses of several inputs into one (Flink's `StatusWatermarkValve`): a task
//! over its input channels, and a source over its splits.
//!
//! Per input: its largest watermark, whether it is active, and whether it is *aligned* — active and not behind
//! the last output. The output is the minimum over aligned inputs, emitted only when it is larger than the last
//! output, so it never goes backwards. An input that goes idle stops counting; if it was the one holding the
//! output back, the minimum over the rest is emitted; if every input is idle, the largest watermark of any
//! input is emitted (when larger) and then the valve itself is idle. An input that becomes active again counts
//! only once its watermark reaches the last output: until then it cannot pull the output back.

use super::{WatermarkOutput, WatermarkStatus, MIN_WATERMARK};

/// One input's watermark and status.
#[derive(Clone, Copy, Debug)]
struct Input {
    watermark: i64,
    active: bool,
    aligned: bool,
}

/// The combined watermark of a fixed number of inputs.
#[derive(Clone, Debug)]
pub struct WatermarkValve {
    inputs: Vec<Input>,
    last_output: i64,
    status: WatermarkStatus,
}

impl WatermarkValve {
    /// A valve over `inputs` inputs, all active, none with a watermark yet.
    pub fn new(inputs: usize) -> Self {
        Self::restored(inputs, MIN_WATERMARK)
    }

    /// A valve that has already emitted `floor` (a restored task's last watermark): it emits nothing at or below
    /// it, so a restore or rescale never sends a watermark backwards.
    pub fn restored(inputs: usize, floor: i64) -> Self {
        WatermarkValve {
            inputs: vec![Input { watermark: MIN_WATERMARK, active: true, aligned: true }; inputs],
            last_output: floor,
            status: WatermarkStatus::Active,
        }
    }

    /// A new input, active and without a watermark: it holds the combined watermark where it is (never back)
    /// until its own catches up.
    pub fn add_input(&mut self) {
        self.inputs.push(Input { watermark: MIN_WATERMARK, active: true, aligned: true });
        self.status = WatermarkStatus::Active;
    }

    /// The last watermark emitted (or the floor).
    pub fn current(&self) -> i64 {
        self.last_output
    }

    /// Whether every input is idle.
    pub fn status(&self) -> WatermarkStatus {
        self.status
    }

    /// Input `i` sent a watermark. A lower one than it sent before, or one from an input that is idle, is ignored.
    pub fn on_watermark(&mut self, i: usize, watermark: i64) -> WatermarkOutput {
        let input = &mut self.inputs[i];
        if !input.active || watermark <= input.watermark {
            return WatermarkOutput::NONE;
        }
        input.watermark = watermark;
        if !input.aligned && watermark >= self.last_output {
            input.aligned = true;
        }
        WatermarkOutput { watermark: self.advance_to_min_of_aligned(), status: None }
    }

    /// Input `i` became idle or active.
    pub fn on_status(&mut self, i: usize, status: WatermarkStatus) -> WatermarkOutput {
        let mut out = WatermarkOutput::NONE;
        let input = &mut self.inputs[i];
        match status {
            WatermarkStatus::Idle if input.active => {
                input.active = false;
                input.aligned = false;
                let was_holding_back = input.watermark == self.last_output;
                if self.inputs.iter().all(|c| !c.active) {
                    if was_holding_back {
                        out.watermark = self.advance_to_max_of_all();
                    }
                    self.status = WatermarkStatus::Idle;
                    out.status = Some(WatermarkStatus::Idle);
                } else if was_holding_back {
                    out.watermark = self.advance_to_min_of_aligned();
                }
            }
            WatermarkStatus::Active if !input.active => {
                input.active = true;
                input.aligned = input.watermark >= self.last_output;
                if self.status == WatermarkStatus::Idle {
                    self.status = WatermarkStatus::Active;
                    out.status = Some(WatermarkStatus::Active);
                }
            }
            _ => {}
        }
        out
    }

    /// The minimum over aligned inputs, if it is larger than the last output (which it becomes).
    fn advance_to_min_of_aligned(&mut self) -> Option<i64> {
        let min = self.inputs.iter().filter(|c| c.aligned).map(|c| c.watermark).min()?;
        self.advance(min)
    }

    /// The maximum over every input, if it is larger than the last output (which it becomes).
    fn advance_to_max_of_all(&mut self) -> Option<i64> {
        let max = self.inputs.iter().map(|c| c.watermark).max()?;
        self.advance(max)
    }

    fn advance(&mut self, to: i64) -> Option<i64> {
        (to > self.last_output).then(|| {
            self.last_output = to;
            to
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::{WatermarkEvent, MAX_WATERMARK};
    use proptest::prelude::*;
    use WatermarkStatus::{Active, Idle};

    fn wm(w: i64) -> WatermarkOutput {
        WatermarkOutput { watermark: Some(w), status: None }
    }

    #[test]
    fn the_output_is_the_minimum_over_inputs_and_only_advances() {
        let mut v = WatermarkValve::new(3);
        assert_eq!(v.on_watermark(0, 10), WatermarkOutput::NONE);
        assert_eq!(v.on_watermark(1, 5), WatermarkOutput::NONE);
        assert_eq!(v.on_watermark(2, 7), wm(5));
        assert_eq!(v.on_watermark(1, 20), wm(7));
        // A lower watermark from an input is ignored; so is the same one again.
        assert_eq!(v.on_watermark(2, 6), WatermarkOutput::NONE);
        assert_eq!(v.on_watermark(2, 7), WatermarkOutput::NONE);
        assert_eq!(v.on_watermark(2, 30), wm(10));
        assert_eq!(v.current(), 10);
    }

    #[test]
    fn an_idle_input_stops_holding_the_output_back_and_rejoins_once_it_catches_up() {
        let mut v = WatermarkValve::new(3);
        v.on_watermark(0, 100);
        v.on_watermark(1, 200);
        assert_eq!(v.on_watermark(2, 50), wm(50));
        // The slowest input goes idle: the minimum over the others.
        assert_eq!(v.on_status(2, Idle), wm(100));
        assert_eq!(v.on_watermark(2, 60), WatermarkOutput::NONE, "an idle input's watermark is ignored");
        // It resumes behind the output: it does not pull the output back, and does not count yet.
        assert_eq!(v.on_status(2, Active), WatermarkOutput::NONE);
        assert_eq!(v.on_watermark(2, 90), WatermarkOutput::NONE);
        assert_eq!(v.on_watermark(0, 300), wm(200));
        // Caught up: it counts again and holds the output.
        assert_eq!(v.on_watermark(2, 250), WatermarkOutput::NONE, "200 still holds the output");
        assert_eq!(v.on_watermark(1, 400), wm(250));
        assert_eq!(v.current(), 250);
    }

    #[test]
    fn when_every_input_is_idle_the_largest_watermark_goes_out_then_idleness() {
        let mut v = WatermarkValve::new(2);
        v.on_watermark(0, 10);
        assert_eq!(v.on_watermark(1, 40), wm(10));
        // Input 1 is ahead: its going idle changes nothing.
        assert_eq!(v.on_status(1, Idle), WatermarkOutput::NONE);
        let out = v.on_status(0, Idle);
        assert_eq!(out, WatermarkOutput { watermark: Some(40), status: Some(Idle) });
        assert_eq!(out.in_order().collect::<Vec<_>>(), [WatermarkEvent::Watermark(40), WatermarkEvent::Status(Idle)]);
        assert_eq!(v.status(), Idle);
        // Active again: the status goes out first, then watermarks as they pass the last output.
        assert_eq!(v.on_status(0, Active), WatermarkOutput { watermark: None, status: Some(Active) });
        assert_eq!(v.on_watermark(0, 30), WatermarkOutput::NONE);
        assert_eq!(v.on_watermark(0, 45), wm(45));
    }

    #[test]
    fn a_restored_valve_never_emits_below_its_floor() {
        let mut v = WatermarkValve::restored(2, 1_000);
        assert_eq!(v.on_watermark(0, 500), WatermarkOutput::NONE);
        assert_eq!(v.on_watermark(1, 900), WatermarkOutput::NONE);
        assert_eq!(v.on_watermark(0, 1_500), WatermarkOutput::NONE);
        assert_eq!(v.on_watermark(1, 1_200), wm(1_200));
    }

    #[test]
    fn ended_inputs_carry_the_maximum_watermark() {
        let mut v = WatermarkValve::new(2);
        assert_eq!(v.on_watermark(0, MAX_WATERMARK), WatermarkOutput::NONE);
        assert_eq!(v.on_watermark(1, 7), wm(7));
        assert_eq!(v.on_watermark(1, MAX_WATERMARK), wm(MAX_WATERMARK));
    }

    proptest! {
        /// Whatever the inputs send, the output only advances, never exceeds what some input sent, and while an
        /// input is active and aligned the output is never above its watermark.
        #[test]
        fn the_output_never_goes_backwards(
            floor in -100i64..100,
            events in proptest::collection::vec((0usize..4, prop_oneof![
                (-200i64..400).prop_map(Ok),
                any::<bool>().prop_map(Err),
            ]), 0..200),
        ) {
            let mut v = WatermarkValve::restored(4, floor);
            let mut last = floor;
            let mut highest_sent = i64::MIN;
            for (i, e) in events {
                let out = match e {
                    Ok(w) => {
                        highest_sent = highest_sent.max(w);
                        v.on_watermark(i, w)
                    }
                    Err(idle) => v.on_status(i, if idle { Idle } else { Active }),
                };
                if let Some(w) = out.watermark {
                    prop_assert!(w > last, "{w} after {last}");
                    prop_assert!(w <= highest_sent);
                    last = w;
                }
                prop_assert_eq!(v.current(), last);
                for c in &v.inputs {
                    if c.aligned {
                        prop_assert!(c.active);
                        prop_assert!(c.watermark >= last || last == floor);
                    }
                }
            }
        }
    }
}
