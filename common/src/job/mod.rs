//! What a job is before it runs: the spec as users write it and its validation ([`spec`]), what an operator kind
//! declares of itself ([`kind`]) and its config values ([`config_value`]), the record schemas on its edges
//! ([`schema`]), a source's watermark strategy ([`watermarks`]) and the datagen record formula ([`datagen`]).

pub mod config_value;
pub mod datagen;
pub mod kind;
pub mod schema;
pub mod spec;
pub mod watermarks;
