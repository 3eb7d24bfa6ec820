//! The built-in operator kinds of DESIGN §10, written against the same API users get.

mod aggregate;
mod blackhole;
mod datagen;
mod file_sink;
mod interval_join;
pub(crate) mod join;
pub mod kafka;
mod keyed_count;
mod nexmark;
mod over;
mod project;
mod text;
mod window_aggregate;
mod window_join;
mod window_top;
mod winning_bids;

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
pub use window_aggregate::{output_schema, window_aggregate, WindowAggregate};
pub use window_join::WindowJoin;
pub use window_top::WindowTop;
pub use winning_bids::WinningBids;

use crate::api::registry::{signed, Instance, Registry};
use weir_common::builtin::{
    builtin_kinds, AggregateConfig, DatagenConfig, FileSinkConfig, FilterConfig, IntervalJoinConfig, JoinConfig,
    KeyedCountConfig, NexmarkConfig, OverConfig, ProjectConfig, WindowAggregateConfig, WindowJoinConfig,
    WindowTopConfig, WinningBidsConfig,
};
use weir_state::signature::StateSignature;

/// The state signature of a built-in kind: what its states hold, as the task manager reports it.
pub fn signature(kind: &str) -> Option<StateSignature> {
    Some(match kind {
        // A split's id and next index.
        "datagen" | "nexmark" => StateSignature::unkeyed().operator_list::<(u32, u64)>("splits"),
        // Every partition's topic, number, next offset and end (−1: none), given whole to every subtask.
        "kafka" => StateSignature::unkeyed().union::<(String, i32, i64, i64)>(kafka::STATE),
        // Keys are the records' raw key bytes.
        "keyed-count" => StateSignature::keyed::<Vec<u8>>().value::<u64>("count"),
        // `<checkpoint>\t<file>` lines, `<attempt>-<seq>`, and lines already written.
        // Accumulators per slice start (or session id), one state per aggregate; a key's open sessions; timers
        // in namespace `f` (fire) or `c` (cleanup), or on the general window operator `w` (window) or `n` + the
        // window's id (continuous firing).
        "window-aggregate" => StateSignature::keyed::<Vec<u8>>()
            .value::<u64>("window-count")
            .in_namespace::<i64>("window-count")
            .value::<(i64, u64)>("window-sum")
            .in_namespace::<i64>("window-sum")
            .value::<i64>("window-min")
            .in_namespace::<i64>("window-min")
            .value::<i64>("window-max")
            .in_namespace::<i64>("window-max")
            .value::<(i64, u64)>("window-avg")
            .in_namespace::<i64>("window-avg")
            .value::<Vec<(i64, i64, i64)>>("window-sessions")
            // The shared part of consecutive sliding windows (count, sum, avg): window end, sum, count.
            .value::<(i64, i64, u64)>("window-run")
            // Other triggers and global windows (the general window operator): an accumulator per slice,
            // session or global window, and a trigger's state per window.
            .value::<window_aggregate::StoredAcc>("window-contents")
            .in_namespace::<i64>("window-contents")
            .value::<Vec<u8>>("window-trigger")
            .in_namespace::<i64>("window-trigger")
            .timers::<Vec<u8>>(),
        // Each input's rows (`api::stored_rows`) per key, and each input's columns.
        "join" => StateSignature::keyed::<Vec<u8>>()
            .list::<Vec<u8>>("join-first")
            .list::<Vec<u8>>("join-second")
            .union::<String>("join-columns"),
        // Per window (namespace: its end), the ranked rows; the input's columns; the windows' timers.
        "window-top" => StateSignature::keyed::<Vec<u8>>()
            .value::<Vec<u8>>("window-top")
            .in_namespace::<i64>("window-top")
            .union::<String>("window-top-columns")
            .timers::<Vec<u8>>(),
        // Per window (namespace: its end), each input's rows; the inputs' columns; the windows' timers.
        "window-join" => StateSignature::keyed::<Vec<u8>>()
            .list::<Vec<u8>>("window-join-first")
            .in_namespace::<i64>("window-join-first")
            .list::<Vec<u8>>("window-join-second")
            .in_namespace::<i64>("window-join-second")
            .union::<String>("window-join-columns")
            .timers::<Vec<u8>>(),
        // Per key, the row count, accumulators and carried columns; the carried columns' types.
        "aggregate" => {
            StateSignature::keyed::<Vec<u8>>().value::<Vec<u8>>("aggregate").union::<String>("aggregate-columns")
        }
        // Per input and time bucket (namespace: the input's byte and the bucket), each input's rows with their
        // times; the inputs' columns; a cleanup timer per input and bucket.
        "interval-join" => StateSignature::keyed::<Vec<u8>>()
            .list::<Vec<u8>>("interval-join-first")
            .in_namespace::<Vec<u8>>("interval-join-first")
            .list::<Vec<u8>>("interval-join-second")
            .in_namespace::<Vec<u8>>("interval-join-second")
            .union::<String>("interval-join-columns")
            .timers::<Vec<u8>>(),
        // Per key and event time (namespace), the rows waiting for the watermark; per key, the preceding rows'
        // values or the running accumulators; the input's columns; the rows' timers.
        "over" => StateSignature::keyed::<Vec<u8>>()
            .list::<Vec<u8>>("over-rows")
            .in_namespace::<i64>("over-rows")
            .value::<Vec<u8>>("over-frame")
            .union::<String>("over-columns")
            .timers::<Vec<u8>>(),
        // Per auction, the auction, its best bid and the bids that came before it; the inputs' columns; timers.
        "winning-bids" => StateSignature::keyed::<Vec<u8>>()
            .value::<Vec<u8>>("winning-bids-auction")
            .value::<Vec<u8>>("winning-bids-best")
            .list::<Vec<u8>>("winning-bids-early")
            .union::<String>("winning-bids-columns")
            .timers::<Vec<u8>>(),
        "kafka-sink" => StateSignature::unkeyed().union::<String>(kafka::SINK_STATE),
        "file-sink" => StateSignature::unkeyed()
            .operator_list::<String>("pending-files")
            .operator_list::<String>("position")
            .operator_list::<Vec<u8>>("replayed-lines"),
        _ => return None,
    })
}

/// A registry holding Weir's built-in kinds (a user's task-manager binary adds its own to it).
pub fn registry() -> Registry {
    let mut r = Registry::new();
    register_all(&mut r);
    r
}

/// Registers every built-in kind.
pub fn register_all(r: &mut Registry) {
    for info in builtin_kinds() {
        let info = match signature(&info.kind) {
            Some(sig) => signed(info, &sig),
            None => info,
        };
        match info.kind.as_str() {
            "datagen" => r.register(info, |c| {
                let cfg = DatagenConfig::from_map(c)?;
                Ok(Instance::Source(Box::new(Datagen::new(cfg))))
            }),
            "kafka" => r.register(info, |c| {
                let cfg = weir_common::kafka::KafkaSourceConfig::from_map(c)?;
                Ok(Instance::Source(Box::new(kafka::KafkaSource::new(cfg))))
            }),
            "kafka-sink" => r.register(info, |c| {
                let cfg = weir_common::kafka::KafkaSinkConfig::from_map(c)?;
                Ok(Instance::Operator(Box::new(kafka::KafkaSink::new(cfg))))
            }),
            "nexmark" => r.register(info, |c| {
                let cfg = NexmarkConfig::from_map(c)?;
                Ok(Instance::Source(Box::new(Nexmark::new(cfg))))
            }),
            "keyed-count" => r.register(info, |c| {
                let cfg = KeyedCountConfig::from_map(c)?;
                Ok(Instance::Operator(Box::new(KeyedCount::new(cfg))))
            }),
            "file-sink" => r.register(info, |c| {
                let cfg = FileSinkConfig::from_map(c)?;
                Ok(Instance::Operator(Box::new(FileSink::new(cfg))))
            }),
            "window-aggregate" => r.register(info, |c| {
                let cfg = WindowAggregateConfig::from_map(c)?;
                Ok(Instance::Operator(window_aggregate(cfg)?))
            }),
            "blackhole" => r.register(info, |_| Ok(Instance::Operator(Box::new(Blackhole::default())))),
            "aggregate" => {
                r.register(info, |c| Ok(Instance::Operator(Box::new(Aggregate::new(AggregateConfig::from_map(c)?)))))
            }
            "window-join" => {
                r.register(info, |c| Ok(Instance::Operator(Box::new(WindowJoin::new(WindowJoinConfig::from_map(c)?)))))
            }
            "interval-join" => r.register(info, |c| {
                Ok(Instance::Operator(Box::new(IntervalJoin::new(IntervalJoinConfig::from_map(c)?))))
            }),
            "over" => r.register(info, |c| Ok(Instance::Operator(Box::new(Over::new(OverConfig::from_map(c)?))))),
            "winning-bids" => r.register(info, |c| {
                Ok(Instance::Operator(Box::new(WinningBids::new(WinningBidsConfig::from_map(c)?))))
            }),
            "window-top" => {
                r.register(info, |c| Ok(Instance::Operator(Box::new(WindowTop::new(WindowTopConfig::from_map(c)?)))))
            }
            "join" => r.register(info, |c| Ok(Instance::Operator(Box::new(Join::new(JoinConfig::from_map(c)?))))),
            "filter" => r.register(info, |c| Ok(Instance::Operator(Box::new(Filter::new(FilterConfig::from_map(c)?))))),
            "project" => {
                r.register(info, |c| Ok(Instance::Operator(Box::new(Project::new(ProjectConfig::from_map(c)?)))))
            }
            _ => {}
        }
    }
}

/// The integers of column `name` of `batch` (32- or 64-bit integers, or millisecond timestamps); `who` names the
/// operator in errors.
pub(crate) fn int_column(
    batch: &arrow_array::RecordBatch,
    name: &str,
    who: &str,
) -> Result<Vec<Option<i64>>, crate::api::operator::OperatorError> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type, TimestampMillisecondType};
    use arrow_schema::{DataType, TimeUnit};
    let col = batch
        .column_by_name(name)
        .ok_or_else(|| crate::api::operator::OperatorError::Other(format!("{who}: no column {name:?}")))?;
    Ok(match col.data_type() {
        DataType::Int64 => col.as_primitive::<Int64Type>().iter().collect(),
        DataType::Int32 => col.as_primitive::<Int32Type>().iter().map(|v| v.map(i64::from)).collect(),
        DataType::Timestamp(TimeUnit::Millisecond, None) => {
            col.as_primitive::<TimestampMillisecondType>().iter().collect()
        }
        t => {
            return Err(crate::api::operator::OperatorError::Other(format!(
                "{who}: column {name:?} is {t}, not an integer"
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::{registry, signature, Blackhole};
    use crate::api::registry::{BuildError, Instance, InvalidConfig};
    use std::collections::BTreeMap;
    use weir_state::signature::assert_signature;

    /// What a factory refuses and what the registry refuses are told apart by type, not by text.
    #[test]
    fn the_registry_says_why_it_built_nothing() {
        let mut r = registry();
        let bad: BTreeMap<String, String> = [("count".to_string(), "many".to_string())].into();
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
        for (kind, text) in pinned {
            assert_signature(kind, &signature(kind).expect("a signature"), text);
        }
        assert!(signature("blackhole").is_none());
    }
}
