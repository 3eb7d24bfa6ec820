//! Windows over event time: which windows and slices a record belongs to and how session windows merge
//! ([`assign`]), the firing and cleanup decisions of sliced tumbling and sliding windows ([`slicing`]), of
//! session windows ([`session`]), when windows fire ([`trigger`]), and the accumulators of the built-in
//! aggregates ([`accumulate`]) — pure decisions —; what a window holds and how it is emitted ([`contents`]:
//! the window functions users write); and the one window operator ([`operator`]), the I/O around them on keyed
//! timers and namespaced state, which the built-in `window-aggregate` (`builtins/`) configures with its own
//! contents.

pub mod accumulate;
pub mod assign;
pub mod config;
pub mod contents;
pub mod operator;
pub mod session;
pub mod slicing;
pub mod trigger;
