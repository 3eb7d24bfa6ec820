//! Windows over event time: which windows and slices a record belongs to and how session windows merge
//! ([`assign`]), the firing and cleanup decisions of sliced tumbling and sliding windows ([`slicing`]), of
//! session windows ([`session`]), when windows fire ([`trigger`]), and the accumulators of the built-in
//! aggregates ([`accumulate`]) — pure decisions —; and the general window operator ([`operator`]) that user kinds
//! build on with typed window functions, the I/O around them on keyed timers and namespaced state. The
//! `window-aggregate` kind (`builtins/`) runs its event-time windows on its own faster path.

pub mod accumulate;
pub mod assign;
pub mod config;
pub mod operator;
pub mod session;
pub mod slicing;
pub mod trigger;
