//! The typed layer over the byte-level [`KeyedStateBackend`](crate::KeyedStateBackend): the handles operators
//! read and write state through, how their values become bytes, the value formats whose serializer snapshots
//! checkpoints record, and the type signatures that tell whether a restored state still fits its declaration.
//!
//! - [`handles`]: [`ValueState`](handles::ValueState), [`ListState`](handles::ListState),
//!   [`MapState`](handles::MapState), [`ReducingState`](handles::ReducingState) and
//!   [`AggregatingState`](handles::AggregatingState), with the TTL semantics on top of the stored bytes.
//! - [`codec`]: [`StateCodec`](codec::StateCodec), how a typed value becomes bytes.
//! - [`formats`]: the `Bincode`, `Avro` and `Protobuf` value formats.
//! - [`evolution`]: whether a new serializer reads what an old one's snapshot wrote (Avro's and Protobuf's
//!   rules), and the migration of stored values.
//! - [`signature`]: state type signatures ([`signature::TypeSignature`], [`signature::StateSignature`]).

pub mod codec;
pub mod evolution;
pub mod formats;
pub mod handles;
pub mod signature;
