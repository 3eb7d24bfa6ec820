//! What every built-in kind's declaration uses: the [`Kind`] trait and the types it speaks, and the description
//! of a built-in kind at this build's version.

pub(crate) use crate::api::kind::Kind;
pub(crate) use crate::api::registry::{Instance, InvalidConfig};
pub(crate) use weir_common::job::kind::{
    field, field_err, state_field, ConfigField, ConfigFieldError, ConfigReader, KindInfo, OperatorConfig, Role,
    SideOutputs, StateClass,
};
pub(crate) use weir_common::job::schema::{key_column, key_value, Column, OutputSchema};
pub(crate) use weir_state::signature::StateSignature;

/// The description of the built-in kind `kind`, at this build's version: what it is for and the config fields it
/// reads.
pub(crate) fn builtin_info(kind: &str, role: Role, keyed: bool, doc: &str, fields: &[ConfigField]) -> KindInfo {
    KindInfo::new(kind, role, keyed, env!("CARGO_PKG_VERSION")).with_doc(doc).with_fields(fields)
}

/// A config map of `pairs`, each value text as a spec that quotes it gives it: what config tests read.
#[cfg(test)]
pub(crate) fn config_map(pairs: &[(&str, &str)]) -> OperatorConfig {
    pairs.iter().map(|(k, v)| (k.to_string(), weir_common::job::kind::ConfigValue::from(*v))).collect()
}
