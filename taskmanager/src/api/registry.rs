//! The operator registry: kind name → factory. A task manager reports its registry when it registers, so the
//! job manager can validate specs without running user code. Users build their own task-manager binary with
//! extra kinds registered (as Flink users ship a jar).

use crate::api::kind::{DynKind, FnKind, Kind};
pub use crate::api::kind::{Instance, InvalidConfig};
use std::collections::BTreeMap;
use std::sync::Arc;
use weir_common::job::kind::{
    ConfigFieldError, KindCatalog, KindInfo, KindSignature, OperatorConfig, Role, SideOutputs,
};
use weir_common::job::schema::Column;
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

/// Kind name → description and declaration.
#[derive(Clone, Default)]
pub struct Registry {
    kinds: BTreeMap<String, (KindInfo, Arc<dyn DynKind>)>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a kind under the name its [`KindInfo`] gives, with its state signature folded into the
    /// description it reports.
    pub fn add<K: Kind>(&mut self, kind: K) {
        let info = match kind.signature() {
            Some(sig) => signed(kind.info(), &sig),
            None => kind.info(),
        };
        self.kinds.insert(info.kind.clone(), (info, Arc::new(kind)));
    }

    /// Registers a kind described by `info` whose factory `build` alone reads the config: it turns the spec's
    /// config into an instance or explains what is wrong (when the kind is deployed; a [`Kind`] of its own also
    /// checks specs before they run).
    pub fn register(
        &mut self,
        info: KindInfo,
        build: impl Fn(&OperatorConfig) -> Result<Instance, InvalidConfig> + Send + Sync + 'static,
    ) {
        self.kinds.insert(info.kind.clone(), (info.clone(), Arc::new(FnKind { info, build })));
    }

    /// Builds an instance of `kind`.
    pub fn build(&self, kind: &str, config: &OperatorConfig) -> Result<Instance, BuildError> {
        let (info, k) = self.kinds.get(kind).ok_or_else(|| BuildError::UnknownKind(kind.to_string()))?;
        let inst = k.build(config)?;
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

    fn declaration(&self, kind: &str) -> Option<&dyn DynKind> {
        self.kinds.get(kind).map(|(_, k)| k.as_ref())
    }
}

/// The kinds' declarations, as the task manager resolves a spec the job manager asks it to check: every check
/// a kind declares runs here, where its code is.
impl KindCatalog for Registry {
    fn info(&self, kind: &str) -> Option<&KindInfo> {
        Registry::info(self, kind)
    }

    fn names(&self) -> Vec<&str> {
        self.kinds.keys().map(String::as_str).collect()
    }

    fn check_config(&self, kind: &str, config: &OperatorConfig) -> Result<(), ConfigFieldError> {
        self.declaration(kind).map_or(Ok(()), |k| k.check_config(config))
    }

    fn side_outputs(&self, kind: &str, config: &OperatorConfig) -> Option<SideOutputs> {
        self.declaration(kind)?.side_outputs(config)
    }

    fn lacks_timestamps(&self, kind: &str, config: &OperatorConfig) -> Option<String> {
        self.declaration(kind)?.lacks_timestamps(config)
    }

    fn derived_output(
        &self,
        kind: &str,
        config: &OperatorConfig,
        inputs: &[Vec<Column>],
    ) -> Option<Result<Vec<Column>, ConfigFieldError>> {
        self.declaration(kind)?.output(config, inputs)
    }

    fn check_input(
        &self,
        kind: &str,
        config: &OperatorConfig,
        input: &[Column],
    ) -> Option<Result<(), ConfigFieldError>> {
        Some(self.declaration(kind)?.check_input(config, input))
    }
}
