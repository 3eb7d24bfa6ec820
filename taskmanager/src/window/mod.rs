//! Windows over event time: which windows and slices a record belongs to and how session windows merge
//! ([`assign`]), the firing and cleanup decisions of sliced tumbling and sliding windows ([`slicing`]), of
//! session windows ([`session`]), and the accumulators of the built-in aggregates ([`accumulate`]). The
//! `window-aggregate` kind (`builtins/`) is the I/O around them, on keyed timers and namespaced state.

pub mod accumulate;
pub mod assign;
pub mod session;
pub mod slicing;
