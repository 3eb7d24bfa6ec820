//! Examples of user code for Weir.
//!
//! - [`buffering_sink`]: the `buffering-sink` kind, Flink's `BufferingSink` (the `CheckpointedFunction`
//!   example) made exactly-once.
//! - [`registry`]: the built-in kinds plus the kinds of this crate; the `weir-example-taskmanager` binary runs
//!   a task manager with it.

pub mod buffering_sink;

use weir_taskmanager::registry::{Instance, Registry};

/// Weir's built-in kinds plus `buffering-sink`.
pub fn registry() -> Registry {
    let mut r = Registry::with_builtins();
    r.register(buffering_sink::kind_info(), |config| {
        let cfg = buffering_sink::BufferingSinkConfig::from_map(config)?;
        Ok(Instance::Operator(Box::new(buffering_sink::BufferingSink::new(cfg))))
    });
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use weir_common::builtin::Role;

    #[test]
    fn registry_has_builtins_and_the_buffering_sink() {
        let r = registry();
        for kind in ["datagen", "keyed-count", "file-sink", "blackhole"] {
            assert!(r.info(kind).is_some(), "{kind} missing");
        }
        let info = r.info(buffering_sink::KIND).expect("buffering-sink registered");
        assert_eq!(info.role, Role::Sink);
        assert!(!info.keyed);
        let config: BTreeMap<String, String> = [("path".to_string(), "/tmp/x".to_string())].into();
        assert!(matches!(r.build(buffering_sink::KIND, &config), Ok(Instance::Operator(_))));
        let err = r.build(buffering_sink::KIND, &BTreeMap::new()).err().expect("path is required");
        assert!(err.contains("path"), "{err}");
    }
}
