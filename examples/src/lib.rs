//! Examples of user code for Weir.
//!
//! - [`buffering_sink`]: the `buffering-sink` kind, Flink's `BufferingSink` (the `CheckpointedFunction`
//!   example) made exactly-once.
//! - [`event_clock`]: the `event-clock` source (splits at different speeds, some idle, with event timestamps)
//!   and the `watermark-log` operator (a record per watermark), for the event-time tests.
//! - [`distinct_values`]: the keyed `distinct-values` kind, a per-key count of distinct recent values in a
//!   `MapState` with time-to-live.
//! - [`stateless`]: the `key-filter` and `value-map` kinds, for the stateless-pipeline benchmark.
//! - [`state_kinds`]: the keyed `state-kinds` kind, which keeps every kind of keyed and operator state (for the
//!   rescaling tests).
//! - [`upgrades`]: the kinds `profiles` (Avro state), `sessions` (Protobuf), `people` (bincode) and `visits`,
//!   each in two versions whose state types differ, for the upgrade-safety tests.
//! - [`windows`]: the window kinds `window-profiles` (an Avro accumulator) and `window-visits` (a
//!   process-window function over Protobuf elements), in two versions, for the window upgrade tests.
//! - [`registry`]: the built-in kinds plus the kinds of this crate (the first version of [`upgrades`]); the
//!   `weir-example-taskmanager` binary runs a task manager with it, `weir-example-taskmanager-v2` one with
//!   [`registry_v2`] (the second version).
//!
//! Their unit tests run each kind as a subtask in the task manager's operator test harness
//! (`weir_taskmanager::testing`): fed batches, watermarks and processing time, snapshotted and restored, at
//! another parallelism too (`distinct_values`), as users' own kinds' tests can.

pub mod buffering_sink;
pub mod distinct_values;
pub mod event_clock;
pub mod state_kinds;
pub mod stateless;
pub mod upgrades;
pub mod windows;

use weir_state::{Avro, Protobuf};
use weir_taskmanager::api::registry::{Instance, Registry};

/// Weir's built-in kinds plus `buffering-sink`, `distinct-values`, `state-kinds` and the first version of the
/// [`upgrades`] kinds.
pub fn registry() -> Registry {
    let mut r = common_registry();
    upgrades::v1::register_kinds(&mut r);
    windows::register_kinds::<Avro<upgrades::v1::Profile>, Protobuf<upgrades::v1::Session>>(&mut r);
    r
}

/// [`registry`] with the second version of the [`upgrades`] kinds.
pub fn registry_v2() -> Registry {
    let mut r = common_registry();
    upgrades::v2::register_kinds(&mut r);
    windows::register_kinds::<Avro<upgrades::v2::Profile>, Protobuf<upgrades::v2::Session>>(&mut r);
    r
}

/// The kinds both versions share.
fn common_registry() -> Registry {
    let mut r = weir_taskmanager::builtins::registry();
    r.register(buffering_sink::kind_info(), |config| {
        let cfg = buffering_sink::BufferingSinkConfig::from_map(config)?;
        Ok(Instance::Operator(Box::new(buffering_sink::BufferingSink::new(cfg))))
    });
    r.register(distinct_values::kind_info(), |config| {
        let cfg = distinct_values::DistinctValuesConfig::from_map(config)?;
        Ok(Instance::Operator(Box::new(distinct_values::DistinctValues::new(cfg))))
    });
    r.register(event_clock::kind_info(), |config| {
        let cfg = event_clock::EventClockConfig::from_map(config)?;
        Ok(Instance::Source(Box::new(event_clock::EventClock::new(cfg))))
    });
    r.register(event_clock::log_kind_info(), |config| match config.keys().next() {
        Some(unknown) => {
            Err(format!("config field {unknown:?}: unknown field ({} takes no config)", event_clock::LOG_KIND).into())
        }
        None => Ok(Instance::Operator(Box::new(event_clock::WatermarkLog))),
    });
    r.register(stateless::kind_info(stateless::FILTER_KIND), |config| {
        Ok(Instance::Operator(Box::new(stateless::KeyFilter::from_map(config)?)))
    });
    r.register(stateless::kind_info(stateless::MAP_KIND), |config| {
        Ok(Instance::Operator(Box::new(stateless::ValueMap::from_map(config)?)))
    });
    r.register(state_kinds::kind_info(), |config| match config.keys().next() {
        Some(unknown) => {
            Err(format!("config field {unknown:?}: unknown field ({} takes no config)", state_kinds::KIND).into())
        }
        None => Ok(Instance::Operator(Box::new(state_kinds::StateKinds::new()))),
    });
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use weir_common::job::kind::Role;

    #[test]
    fn registry_has_builtins_and_the_buffering_sink() {
        let r = registry();
        for kind in ["datagen", "keyed-count", "file-sink", "blackhole"] {
            assert!(r.info(kind).is_some(), "{kind} missing");
        }
        let info = r.info(buffering_sink::KIND).expect("buffering-sink registered");
        assert_eq!(info.role, Role::Sink);
        assert!(!info.keyed);
        let config = BTreeMap::from([("path".to_string(), "/tmp/x".into())]);
        assert!(matches!(r.build(buffering_sink::KIND, &config), Ok(Instance::Operator(_))));
        let err = r.build(buffering_sink::KIND, &BTreeMap::new()).err().expect("path is required");
        assert!(err.to_string().contains("path"), "{err}");
    }

    #[test]
    fn registry_has_distinct_values() {
        let r = registry();
        let info = r.info(distinct_values::KIND).expect("distinct-values registered");
        assert_eq!(info.role, Role::Operator);
        assert!(info.keyed, "its input must be partitioned by key");
        assert!(matches!(r.build(distinct_values::KIND, &BTreeMap::new()), Ok(Instance::Operator(_))));
        let config = BTreeMap::from([("ttl_ms".to_string(), 0.into())]);
        let err = r.build(distinct_values::KIND, &config).err().expect("ttl_ms must be positive");
        assert!(err.to_string().contains("ttl_ms"), "{err}");
    }
}
