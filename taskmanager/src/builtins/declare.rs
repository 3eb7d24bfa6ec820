//! What every built-in kind's declaration uses: the [`Kind`] trait and the types it speaks, and the description
//! of a built-in kind at this build's version.

pub(crate) use crate::api::kind::Kind;
pub(crate) use crate::api::registry::{Instance, InvalidConfig};
pub(crate) use weir_common::kind::{ConfigFieldError, KindInfo, OperatorConfig, Role, SideOutputs};
pub(crate) use weir_common::schema::{key_column, key_value, Column, OutputSchema};
pub(crate) use weir_state::signature::StateSignature;

/// The description of the built-in kind `kind`, at this build's version.
pub(crate) fn builtin_info(kind: &str, role: Role, keyed: bool) -> KindInfo {
    KindInfo::new(kind, role, keyed, env!("CARGO_PKG_VERSION"))
}
