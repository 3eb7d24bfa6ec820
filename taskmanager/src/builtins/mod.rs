//! The built-in operator kinds of DESIGN §10, written against the same API users get.

mod blackhole;
mod datagen;
mod file_sink;
mod keyed_count;

pub use blackhole::Blackhole;
pub use datagen::Datagen;
pub use file_sink::FileSink;
pub use keyed_count::KeyedCount;

use crate::registry::{Instance, Registry};
use weir_common::builtin::{builtin_kinds, DatagenConfig, FileSinkConfig, KeyedCountConfig};

/// Registers every built-in kind.
pub fn register_all(r: &mut Registry) {
    for info in builtin_kinds() {
        match info.kind.as_str() {
            "datagen" => r.register(info, |c| {
                let cfg = DatagenConfig::from_map(c).map_err(|e| e.to_string())?;
                Ok(Instance::Source(Box::new(Datagen::new(cfg))))
            }),
            "keyed-count" => r.register(info, |c| {
                let cfg = KeyedCountConfig::from_map(c).map_err(|e| e.to_string())?;
                Ok(Instance::Operator(Box::new(KeyedCount::new(cfg))))
            }),
            "file-sink" => r.register(info, |c| {
                let cfg = FileSinkConfig::from_map(c).map_err(|e| e.to_string())?;
                Ok(Instance::Operator(Box::new(FileSink::new(cfg))))
            }),
            "blackhole" => r.register(info, |_| Ok(Instance::Operator(Box::new(Blackhole::default())))),
            _ => {}
        }
    }
}
