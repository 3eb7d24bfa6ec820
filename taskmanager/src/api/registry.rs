//! The operator registry: kind name → factory. A task manager reports its registry when it registers, so the
//! job manager can validate specs without running user code. Users build their own task-manager binary with
//! extra kinds registered (as Flink users ship a jar).

use crate::api::operator::{Operator, Source};
use std::collections::BTreeMap;
use std::sync::Arc;
use weir_common::builtin::{BuiltinCatalog, ConfigFieldError, KindInfo, KindSignature, Role};
use weir_common::schema::Column;
use weir_common::spec::SideOutputs;
use weir_state::signature::StateSignature;

/// `info` with its kind's state signature, which the task manager reports at registration: checkpoints record
/// it and a restore into a kind whose signature changed is refused (or drops the state, with permission).
pub fn signed(mut info: KindInfo, signature: &StateSignature) -> KindInfo {
    info.signature = Some(KindSignature {
        fingerprint: signature.hex(),
        text: signature.pretty(),
        key: signature.key_serializer().cloned(),
        states: signature.serializers().cloned().collect(),
    });
    info
}

/// A freshly built operator instance.
pub enum Instance {
    /// A source.
    Source(Box<dyn Source>),
    /// An operator or sink.
    Operator(Box<dyn Operator>),
}

/// Why a kind's factory refused the config it was given; the message names the field and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidConfig(pub String);

impl From<String> for InvalidConfig {
    fn from(message: String) -> Self {
        InvalidConfig(message)
    }
}

impl From<&str> for InvalidConfig {
    fn from(message: &str) -> Self {
        InvalidConfig(message.to_string())
    }
}

impl From<weir_common::builtin::ConfigFieldError> for InvalidConfig {
    fn from(e: weir_common::builtin::ConfigFieldError) -> Self {
        InvalidConfig(e.to_string())
    }
}

/// Why no instance of a kind could be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// No kind of that name is registered.
    #[error("unknown operator kind {0:?}")]
    UnknownKind(String),
    /// The kind's factory refused the config.
    #[error(transparent)]
    Config(#[from] InvalidConfig),
    /// The factory built a source for an operator kind, or the other way round.
    #[error("kind {0:?} built an instance that does not match its declared role")]
    RoleMismatch(String),
}

type Factory = Arc<dyn Fn(&BTreeMap<String, String>) -> Result<Instance, InvalidConfig> + Send + Sync>;

/// Kind name → description and factory.
#[derive(Clone, Default)]
pub struct Registry {
    kinds: BTreeMap<String, (KindInfo, Factory)>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a kind; `build` turns the spec's config into an instance or explains what is wrong.
    pub fn register(
        &mut self,
        info: KindInfo,
        build: impl Fn(&BTreeMap<String, String>) -> Result<Instance, InvalidConfig> + Send + Sync + 'static,
    ) {
        self.kinds.insert(info.kind.clone(), (info, Arc::new(build)));
    }

    /// Builds an instance of `kind`.
    pub fn build(&self, kind: &str, config: &BTreeMap<String, String>) -> Result<Instance, BuildError> {
        let (info, f) = self.kinds.get(kind).ok_or_else(|| BuildError::UnknownKind(kind.to_string()))?;
        let inst = f(config)?;
        match (&inst, info.role) {
            (Instance::Source(_), Role::Source)
            | (Instance::Operator(_), Role::Operator | Role::TwoInput | Role::Sink) => Ok(inst),
            _ => Err(BuildError::RoleMismatch(kind.to_string())),
        }
    }

    /// The description of a kind.
    pub fn info(&self, kind: &str) -> Option<&KindInfo> {
        self.kinds.get(kind).map(|(i, _)| i)
    }

    /// Every kind's description.
    pub fn kinds(&self) -> impl Iterator<Item = &KindInfo> {
        self.kinds.values().map(|(i, _)| i)
    }
}

/// The kinds' declarations, as the task manager resolves a spec the job manager asks it to check: every check
/// a kind declares runs here, where its code is.
impl weir_common::spec::KindCatalog for Registry {
    fn info(&self, kind: &str) -> Option<&KindInfo> {
        Registry::info(self, kind)
    }

    fn names(&self) -> Vec<&str> {
        self.kinds.keys().map(String::as_str).collect()
    }

    fn check_config(&self, kind: &str, config: &BTreeMap<String, String>) -> Result<(), ConfigFieldError> {
        weir_common::builtin::validate_builtin_config(kind, config)
    }

    fn side_outputs(&self, kind: &str, config: &BTreeMap<String, String>) -> Option<SideOutputs> {
        BuiltinCatalog::default().side_outputs(kind, config)
    }

    fn lacks_timestamps(&self, kind: &str, config: &BTreeMap<String, String>) -> Option<String> {
        weir_common::builtin::lacks_timestamps(kind, config)
    }

    fn derived_output(
        &self,
        kind: &str,
        config: &BTreeMap<String, String>,
        inputs: &[Vec<Column>],
    ) -> Option<Result<Vec<Column>, ConfigFieldError>> {
        weir_common::builtin::derived_output(kind, config, inputs)
    }

    fn check_input(
        &self,
        kind: &str,
        config: &BTreeMap<String, String>,
        input: &[Column],
    ) -> Option<Result<(), ConfigFieldError>> {
        weir_common::builtin::check_input(kind, config, input)
    }
}
