//! Windows over event time: which windows and slices a record belongs to and how session windows merge
//! ([`assign`]). The window operator built on keyed timers and namespaced state comes with issue 20.

pub mod assign;
