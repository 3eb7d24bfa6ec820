//! An operator kind, declared once: its name, role and state, its typed config and the checks on it, the columns
//! it needs and emits, its side outputs, and how to build it. Built-in kinds and users' kinds implement the same
//! [`Kind`] trait and go into the same [`Registry`](super::registry::Registry); the task manager reports each
//! kind's [`KindInfo`] when it registers, and checks specs with the rest when the job manager asks.

use crate::api::operator::{Operator, Source};
use weir_common::job::kind::{ConfigFieldError, KindInfo, OperatorConfig, SideOutputs};
use weir_common::job::schema::Column;
use weir_state::signature::StateSignature;

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

impl From<ConfigFieldError> for InvalidConfig {
    fn from(e: ConfigFieldError) -> Self {
        InvalidConfig(e.to_string())
    }
}

/// An operator kind: everything about it in one place.
pub trait Kind: Send + Sync + 'static {
    /// Its config, read and checked from a spec's.
    type Config;

    /// What the job manager knows of it: name, role, whether it is keyed, its version, its declared states and
    /// the columns it needs and emits.
    fn info(&self) -> KindInfo;

    /// What its state holds, recorded in checkpoints and compared on restore (`None`: it keeps no state).
    fn signature(&self) -> Option<StateSignature> {
        None
    }

    /// Reads and checks a spec's config, naming the field at fault.
    fn config(&self, config: &OperatorConfig) -> Result<Self::Config, ConfigFieldError>;

    /// The side outputs an operator of the kind has with `config`, and those another config would give it.
    fn side_outputs(&self, _config: &Self::Config) -> SideOutputs {
        SideOutputs::default()
    }

    /// A source: why its records carry no event time with `config`, if they do not.
    fn lacks_timestamps(&self, _config: &Self::Config) -> Option<String> {
        None
    }

    /// A kind whose output follows from its config (`OutputSchema::FromConfig`): the columns it emits over
    /// `inputs`, one list per input (`None`: it cannot tell before it runs).
    fn output(&self, _config: &Self::Config, _inputs: &[Vec<Column>]) -> Option<Result<Vec<Column>, ConfigFieldError>> {
        None
    }

    /// Checks the input columns `config` names (a field to aggregate, a key column) against what the input emits.
    fn check_input(&self, _config: &Self::Config, _input: &[Column]) -> Result<(), ConfigFieldError> {
        Ok(())
    }

    /// Builds an operator (or source) of the kind.
    fn build(&self, config: Self::Config) -> Result<Instance, InvalidConfig>;
}

/// A [`Kind`] with its config type erased, as the registry holds it: every call reads the config afresh.
pub(crate) trait DynKind: Send + Sync {
    fn check_config(&self, config: &OperatorConfig) -> Result<(), ConfigFieldError>;
    fn side_outputs(&self, config: &OperatorConfig) -> Option<SideOutputs>;
    fn lacks_timestamps(&self, config: &OperatorConfig) -> Option<String>;
    fn output(&self, config: &OperatorConfig, inputs: &[Vec<Column>]) -> Option<Result<Vec<Column>, ConfigFieldError>>;
    fn check_input(&self, config: &OperatorConfig, input: &[Column]) -> Result<(), ConfigFieldError>;
    fn build(&self, config: &OperatorConfig) -> Result<Instance, InvalidConfig>;
}

impl<K: Kind> DynKind for K {
    fn check_config(&self, config: &OperatorConfig) -> Result<(), ConfigFieldError> {
        self.config(config).map(|_| ())
    }

    fn side_outputs(&self, config: &OperatorConfig) -> Option<SideOutputs> {
        self.config(config).ok().map(|c| Kind::side_outputs(self, &c))
    }

    fn lacks_timestamps(&self, config: &OperatorConfig) -> Option<String> {
        Kind::lacks_timestamps(self, &self.config(config).ok()?)
    }

    fn output(&self, config: &OperatorConfig, inputs: &[Vec<Column>]) -> Option<Result<Vec<Column>, ConfigFieldError>> {
        match self.config(config) {
            Ok(c) => Kind::output(self, &c, inputs),
            Err(e) => Some(Err(e)),
        }
    }

    fn check_input(&self, config: &OperatorConfig, input: &[Column]) -> Result<(), ConfigFieldError> {
        Kind::check_input(self, &self.config(config)?, input)
    }

    fn build(&self, config: &OperatorConfig) -> Result<Instance, InvalidConfig> {
        Kind::build(self, self.config(config)?)
    }
}

/// A kind made of a description and a factory, whose config the factory alone reads: what
/// [`Registry::register`](super::registry::Registry::register) registers.
pub(crate) struct FnKind<F> {
    pub(crate) info: KindInfo,
    pub(crate) build: F,
}

impl<F> Kind for FnKind<F>
where
    F: Fn(&OperatorConfig) -> Result<Instance, InvalidConfig> + Send + Sync + 'static,
{
    type Config = OperatorConfig;

    fn info(&self) -> KindInfo {
        self.info.clone()
    }

    fn config(&self, config: &OperatorConfig) -> Result<OperatorConfig, ConfigFieldError> {
        Ok(config.clone())
    }

    fn build(&self, config: OperatorConfig) -> Result<Instance, InvalidConfig> {
        (self.build)(&config)
    }
}
