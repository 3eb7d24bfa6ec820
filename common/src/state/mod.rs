//! What keyed state is made of, as every crate sees it: key groups ([`keygroup`]: Flink's
//! `KeyGroupRangeAssignment`, murmur3 over key bytes) and the snapshots state serializers leave in checkpoints
//! ([`serializer`]).

pub mod keygroup;
pub mod serializer;
