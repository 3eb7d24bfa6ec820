//! The built-in operator kinds of DESIGN §10, written against the same API users get.

pub mod aggregate;
pub mod blackhole;
pub mod datagen;
pub(crate) mod declare;
pub mod file_sink;
pub mod interval_join;
pub mod join;
pub mod kafka;
pub mod keyed_count;
pub mod nexmark;
pub mod over;
pub mod project;
mod relational;
mod specs;
mod text;
pub mod window_aggregate;
pub mod window_join;
pub mod window_top;
pub mod winning_bids;

pub use aggregate::Aggregate;
pub use blackhole::Blackhole;
pub use datagen::Datagen;
pub use file_sink::FileSink;
pub use interval_join::IntervalJoin;
pub use join::Join;
pub use keyed_count::KeyedCount;
pub use nexmark::{nexmark_schema, Nexmark};
pub use over::Over;
pub use project::{Filter, Project};
pub use window_aggregate::{output_schema, window_aggregate};
pub use window_join::WindowJoin;
pub use window_top::WindowTop;
pub use winning_bids::WinningBids;

use crate::api::registry::Registry;

/// A registry holding Weir's built-in kinds (a user's task-manager binary adds its own to it).
pub fn registry() -> Registry {
    let mut r = Registry::new();
    r.add(datagen::DatagenKind);
    r.add(nexmark::NexmarkKind);
    r.add(kafka::KafkaKind);
    r.add(keyed_count::KeyedCountKind);
    r.add(project::FilterKind);
    r.add(project::ProjectKind);
    r.add(aggregate::AggregateKind);
    r.add(over::OverKind);
    r.add(window_aggregate::WindowAggregateKind);
    r.add(window_top::WindowTopKind);
    r.add(join::JoinKind);
    r.add(interval_join::IntervalJoinKind);
    r.add(window_join::WindowJoinKind);
    r.add(winning_bids::WinningBidsKind);
    r.add(file_sink::FileSinkKind);
    r.add(kafka::KafkaSinkKind);
    r.add(blackhole::BlackholeKind);
    r
}

#[cfg(test)]
mod tests {
    use super::{registry, Blackhole};
    use crate::api::kind::Kind;
    use crate::api::registry::{BuildError, Instance, InvalidConfig};
    use std::collections::BTreeMap;
    use weir_state::signature::assert_signature;

    /// What a factory refuses and what the registry refuses are told apart by type, not by text.
    #[test]
    fn the_registry_says_why_it_built_nothing() {
        let mut r = registry();
        let bad = crate::builtins::declare::config_map(&[("count", "many")]);
        match r.build("datagen", &bad) {
            Err(BuildError::Config(InvalidConfig(why))) => assert!(why.contains("count"), "{why}"),
            other => panic!("expected the factory's refusal, got {:?}", other.err()),
        }
        assert_eq!(r.build("nope", &BTreeMap::new()).err(), Some(BuildError::UnknownKind("nope".into())));
        // A kind declared a source whose factory builds an operator.
        let mut info = r.info("datagen").unwrap().clone();
        info.kind = "liar".into();
        r.register(info, |_| Ok(Instance::Operator(Box::new(Blackhole::default()))));
        assert_eq!(r.build("liar", &BTreeMap::new()).err(), Some(BuildError::RoleMismatch("liar".into())));
        assert!(r.build("datagen", &BTreeMap::new()).is_ok());
    }

    /// The built-in kinds' state must restore across Weir versions: a change here is a reviewed decision.
    #[test]
    fn the_built_in_state_signatures_are_pinned() {
        let pinned = [
            ("datagen", "unkeyed\noperator-list \"splits\": (u32, u64)"),
            ("keyed-count", "key: seq<u8>\nvalue \"count\": u64"),
            (
                "window-aggregate",
                "key: seq<u8>\n\
                 timers \"_timers.event\": (), custom namespace seq<u8> v1\n\
                 timers \"_timers.processing\": (), custom namespace seq<u8> v1\n\
                 value \"window-avg\": (i64, u64), custom namespace i64 v1\n\
                 value \"window-contents\": custom window-aggregate accumulator v1, custom namespace i64 v1\n\
                 value \"window-count\": u64, custom namespace i64 v1\n\
                 value \"window-max\": i64, custom namespace i64 v1\n\
                 value \"window-min\": i64, custom namespace i64 v1\n\
                 value \"window-run\": (i64, i64, u64)\n\
                 value \"window-sessions\": seq<(i64, i64, i64)>\n\
                 value \"window-sum\": (i64, u64), custom namespace i64 v1\n\
                 value \"window-trigger\": seq<u8>, custom namespace i64 v1",
            ),
            (
                "file-sink",
                "unkeyed\noperator-list \"pending-files\": string\noperator-list \"position\": string\n\
                 operator-list \"replayed-lines\": seq<u8>",
            ),
        ];
        let signature = |kind: &str| match kind {
            "datagen" => super::datagen::DatagenKind.signature(),
            "keyed-count" => super::keyed_count::KeyedCountKind.signature(),
            "window-aggregate" => super::window_aggregate::WindowAggregateKind.signature(),
            "file-sink" => super::file_sink::FileSinkKind.signature(),
            _ => super::blackhole::BlackholeKind.signature(),
        };
        for (kind, text) in pinned {
            assert_signature(kind, &signature(kind).expect("a signature"), text);
        }
        assert!(signature("blackhole").is_none());
        // Every built-in kind reports the signature it declares.
        for info in registry().kinds() {
            assert_eq!(
                info.signature.is_some(),
                !["filter", "project", "blackhole"].contains(&info.kind.as_str()),
                "{}",
                info.kind
            );
        }
    }
}
