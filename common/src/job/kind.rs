//! What an operator kind declares of itself, as both sides see it: the job manager knows kinds only from what
//! task managers report ([`KindInfo`]: name, role, state, declared columns) and resolves a spec's structure with
//! that ([`KindCatalog`] over reported kinds); a task manager runs each kind's own declaration (its typed config,
//! its columns, side outputs and event time) and checks the rest. Config fields are named in every error
//! ([`ConfigFieldError`]); [`ConfigReader`] reads a spec's config map for the kinds that parse one.

pub use crate::job::config_value::ConfigValue;
use crate::job::schema::{Column, OutputSchema};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use weir_proto as pb;

/// What an operator kind does in a job graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Produces records; has no input.
    Source,
    /// Consumes and produces records.
    Operator,
    /// Consumes the records of two inputs (both partitioned alike) and produces records: a join.
    TwoInput,
    /// Consumes records; has no output.
    Sink,
}

impl Role {
    /// The role's name as it appears on the wire.
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::Source => "source",
            Role::Operator => "operator",
            Role::TwoInput => "two-input",
            Role::Sink => "sink",
        }
    }
}

/// The kind of a declared state: Flink's state primitives, keyed and operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StateClass {
    /// Keyed: one value per key.
    Value,
    /// Keyed: a list per key.
    List,
    /// Keyed: a map per key.
    Map,
    /// Keyed: a value folded by a reduce function.
    Reducing,
    /// Keyed: an accumulator folded by an aggregate function.
    Aggregating,
    /// Operator state, redistributed round-robin on rescale.
    OperatorList,
    /// Operator state every subtask gets whole on restore.
    Union,
    /// Operator state of a broadcast input.
    Broadcast,
}

impl StateClass {
    /// Its name as `weir kinds` prints it.
    pub fn as_str(&self) -> &'static str {
        match self {
            StateClass::Value => "value",
            StateClass::List => "list",
            StateClass::Map => "map",
            StateClass::Reducing => "reducing",
            StateClass::Aggregating => "aggregating",
            StateClass::OperatorList => "operator-list",
            StateClass::Union => "union",
            StateClass::Broadcast => "broadcast",
        }
    }
}

/// A state an operator kind declares.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeclaredState {
    /// The state's name (unique within the kind).
    pub name: String,
    /// Its kind.
    pub kind: StateClass,
    /// What it holds, as a type name.
    #[serde(rename = "type")]
    pub type_name: String,
}

/// A config field as a kind declares it, in a `const` beside its config type: its name and what it is for. The
/// same list refuses unknown fields ([`ConfigReader::new`]) and documents the known ones ([`KindInfo::with_fields`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfigField {
    /// The field's name in a spec's `config:`.
    pub name: &'static str,
    /// What it is for, its default and its unit.
    pub doc: &'static str,
    /// Its value shapes what the operator's state holds (an aggregate list, a window): a restore into an operator
    /// whose value differs from the one the state was written with is named in the pre-flight verdicts.
    pub shapes_state: bool,
}

/// A [`ConfigField`] named `name`, documented by `doc`.
pub const fn field(name: &'static str, doc: &'static str) -> ConfigField {
    ConfigField { name, doc, shapes_state: false }
}

/// A [`ConfigField`] named `name`, documented by `doc`, whose value shapes the operator's state.
pub const fn state_field(name: &'static str, doc: &'static str) -> ConfigField {
    ConfigField { name, doc, shapes_state: true }
}

/// A config field as the job manager and `weir kinds` know it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldInfo {
    /// The field's name.
    pub name: String,
    /// What it is for.
    pub doc: String,
    /// Its value shapes what the operator's state holds ([`ConfigField::shapes_state`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shapes_state: bool,
}

/// What the job manager knows of an operator kind without running it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindInfo {
    /// The kind's name in the registry.
    pub kind: String,
    /// Source, operator or sink.
    pub role: Role,
    /// Whether the kind keeps keyed state (its input is then partitioned by key).
    pub keyed: bool,
    /// The kind's version.
    pub version: String,
    /// What the kind is for, one line (what `weir kinds` shows).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub doc: String,
    /// The config fields it reads, with what each is for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldInfo>,
    /// Its declared states.
    pub states: Vec<DeclaredState>,
    /// The state signature the task manager computed for the kind (`weir_state::signature`), if it has state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<KindSignature>,
    /// The columns it needs from its input (empty: any input; a keyed kind needs the key besides).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_columns: Vec<crate::job::schema::Column>,
    /// What it emits.
    #[serde(default)]
    pub output: crate::job::schema::OutputSchema,
    /// It works on event time (windows): a spec whose source emits no timestamps is refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub needs_event_time: bool,
}

impl KindInfo {
    /// A kind named `kind` of `role`, keyed or not, at `version`, that declares nothing else yet.
    pub fn new(kind: &str, role: Role, keyed: bool, version: &str) -> Self {
        KindInfo {
            kind: kind.to_string(),
            role,
            keyed,
            version: version.to_string(),
            doc: String::new(),
            fields: Vec::new(),
            states: Vec::new(),
            signature: None,
            input_columns: Vec::new(),
            output: Default::default(),
            needs_event_time: false,
        }
    }

    /// The same kind declaring its states: (name, state kind, what it holds).
    pub fn with_states(mut self, states: &[(&str, StateClass, &str)]) -> Self {
        self.states = states
            .iter()
            .map(|(n, k, t)| DeclaredState { name: n.to_string(), kind: *k, type_name: t.to_string() })
            .collect();
        self
    }

    /// The same kind saying what it is for, in one line.
    pub fn with_doc(mut self, doc: &str) -> Self {
        self.doc = doc.to_string();
        self
    }

    /// The same kind declaring the config fields it reads.
    pub fn with_fields(mut self, fields: &[ConfigField]) -> Self {
        self.fields = fields
            .iter()
            .map(|f| FieldInfo { name: f.name.to_string(), doc: f.doc.to_string(), shapes_state: f.shapes_state })
            .collect();
        self
    }

    /// The same kind declaring that it works on event time.
    pub fn on_event_time(mut self) -> Self {
        self.needs_event_time = true;
        self
    }

    /// The same kind declaring that it needs `columns` from its input.
    pub fn with_input(mut self, columns: Vec<crate::job::schema::Column>) -> Self {
        self.input_columns = columns;
        self
    }

    /// The same kind declaring what it emits.
    pub fn with_output(mut self, output: crate::job::schema::OutputSchema) -> Self {
        self.output = output;
        self
    }
}

/// An operator kind's state signature as the job manager handles it: computed in the task manager (where the
/// types live), recorded in checkpoints, compared on restore.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindSignature {
    /// The stable fingerprint, 16 hex digits.
    pub fingerprint: String,
    /// The structure, one state per line (what a refused restore prints).
    pub text: String,
    /// The key's serializer (keyed kinds): keys are never migrated, so a restore into another one is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<crate::state::serializer::SerializerSnapshot>,
    /// Each declared state's serializers: what a restore resolves state by state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<crate::state::serializer::StateSerializers>,
}

/// A problem with one field of an operator's config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config field {field:?}: {message}")]
pub struct ConfigFieldError {
    /// The offending field.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

/// Checks that the input column `name`, which config field `field` names, is among `input`'s columns and of one
/// of `types` (any type when empty), naming the field and listing the columns otherwise.
pub fn input_column(input: &[Column], field: &str, name: &str, types: &[&str]) -> Result<(), ConfigFieldError> {
    match input.iter().find(|c| c.name == name) {
        None => {
            let names = input.iter().map(|c| format!("{}: {}", c.name, c.data_type)).collect::<Vec<_>>().join(", ");
            Err(field_err(field, format!("no input column {} (the input has {names})", crate::text::echo(name))))
        }
        Some(c) if !types.is_empty() && !types.contains(&c.data_type.as_str()) => {
            Err(field_err(field, format!("input column {:?} is {}, not {}", c.name, c.data_type, types.join(" or "))))
        }
        Some(_) => Ok(()),
    }
}

/// A [`ConfigFieldError`] for `field`.
pub fn field_err(field: &str, message: impl Into<String>) -> ConfigFieldError {
    ConfigFieldError { field: field.to_string(), message: message.into() }
}

/// Reads an operator's config map field by field, refusing fields the kind does not know.
pub struct ConfigReader<'a> {
    map: &'a OperatorConfig,
    allowed: &'static [ConfigField],
}

impl<'a> ConfigReader<'a> {
    /// A reader of `map` for a kind whose fields are `allowed`: any other field is refused, naming it.
    pub fn new(map: &'a OperatorConfig, allowed: &'static [ConfigField]) -> Result<Self, ConfigFieldError> {
        if let Some(unknown) = map.keys().find(|k| !allowed.iter().any(|f| f.name == k.as_str())) {
            let known = if allowed.is_empty() {
                "none".to_string()
            } else {
                allowed.iter().map(|f| f.name).collect::<Vec<_>>().join(", ")
            };
            return Err(field_err(unknown, format!("unknown field (known fields: {known})")));
        }
        Ok(ConfigReader { map, allowed })
    }

    /// The field's value as the spec wrote it.
    pub fn value(&self, field: &str) -> Option<&'a ConfigValue> {
        debug_assert!(self.allowed.iter().any(|f| f.name == field), "{field} is not a declared field");
        self.map.get(field)
    }

    /// Whether the spec sets the field.
    pub fn has(&self, field: &str) -> bool {
        self.value(field).is_some()
    }

    /// An unsigned integer field: a number, or text of one (`_` separators allowed).
    pub fn u64(&self, field: &str) -> Result<Option<u64>, ConfigFieldError> {
        self.integer(field, "a non-negative integer", serde_json::Number::as_u64)
    }

    /// A signed integer field: a number, or text of one (`_` separators allowed).
    pub fn i64(&self, field: &str) -> Result<Option<i64>, ConfigFieldError> {
        self.integer(field, "an integer", serde_json::Number::as_i64)
    }

    /// An integer field of type `T`, read from a number by `of_number` or parsed from text.
    fn integer<T: std::str::FromStr>(
        &self,
        field: &str,
        what: &str,
        of_number: fn(&serde_json::Number) -> Option<T>,
    ) -> Result<Option<T>, ConfigFieldError> {
        let expected = |shown: &str| field_err(field, format!("expected {what}, got {shown}"));
        match self.value(field) {
            None => Ok(None),
            Some(ConfigValue::Number(n)) => of_number(n).map(Some).ok_or_else(|| expected(&n.to_string())),
            Some(ConfigValue::String(s)) => {
                s.trim().replace('_', "").parse::<T>().map(Some).map_err(|_| expected(&crate::text::echo(s)))
            }
            Some(other) => Err(expected(shape_of(other))),
        }
    }

    /// A text field: text, or a number or flag as its text. A list or a map is refused.
    pub fn string(&self, field: &str) -> Result<Option<String>, ConfigFieldError> {
        match self.value(field) {
            None => Ok(None),
            Some(v) => {
                scalar_text(v).map(Some).ok_or_else(|| field_err(field, format!("expected text, got {}", shape_of(v))))
            }
        }
    }

    /// A flag: true or false (or their text).
    pub fn bool(&self, field: &str) -> Result<Option<bool>, ConfigFieldError> {
        match self.value(field) {
            None => Ok(None),
            Some(ConfigValue::Bool(b)) => Ok(Some(*b)),
            Some(ConfigValue::String(s)) if matches!(s.trim(), "true" | "false") => Ok(Some(s.trim() == "true")),
            Some(other) => Err(field_err(field, format!("expected true or false, got {}", shown(other)))),
        }
    }

    /// A list or map read into `T` (`shape` says what is expected). Text holding JSON is read too: job records
    /// stored before configs were typed carry nested values that way.
    pub fn nested<T: serde::de::DeserializeOwned>(
        &self,
        field: &str,
        shape: &str,
    ) -> Result<Option<T>, ConfigFieldError> {
        let wrong = |e: serde_json::Error| field_err(field, format!("expected {shape}: {e}"));
        match self.value(field) {
            None => Ok(None),
            Some(ConfigValue::String(s)) => serde_json::from_str(s).map(Some).map_err(wrong),
            Some(v) => T::deserialize(v).map(Some).map_err(wrong),
        }
    }

    /// A field given either as text or as a nested value, as JSON text (an inline schema, say).
    pub fn json_text(&self, field: &str) -> Option<String> {
        self.value(field).map(|v| scalar_text(v).unwrap_or_else(|| v.to_string()))
    }
}

/// A scalar's text (`None` for a list or map); null is empty text.
fn scalar_text(v: &ConfigValue) -> Option<String> {
    match v {
        ConfigValue::String(s) => Some(s.clone()),
        ConfigValue::Number(n) => Some(n.to_string()),
        ConfigValue::Bool(b) => Some(b.to_string()),
        ConfigValue::Null => Some(String::new()),
        ConfigValue::Array(_) | ConfigValue::Object(_) => None,
    }
}

/// What kind of value `v` is, for an error that cannot quote it whole.
fn shape_of(v: &ConfigValue) -> &'static str {
    match v {
        ConfigValue::Null => "null",
        ConfigValue::Bool(_) => "a flag",
        ConfigValue::Number(_) => "a number",
        ConfigValue::String(_) => "text",
        ConfigValue::Array(_) => "a list",
        ConfigValue::Object(_) => "a map",
    }
}

/// A value quoted in an error: a scalar as written, a list or map by its shape.
fn shown(v: &ConfigValue) -> String {
    match v {
        ConfigValue::String(s) => crate::text::echo(s),
        ConfigValue::Array(_) | ConfigValue::Object(_) => shape_of(v).to_string(),
        other => other.to_string(),
    }
}

/// An operator's config as a spec gives it: field name to typed value.
pub type OperatorConfig = BTreeMap<String, ConfigValue>;

/// A kind's side outputs over a config, and what to say when an operator reads one it does not have.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SideOutputs {
    /// The tags of the side outputs the kind has with this config.
    pub tags: Vec<String>,
    /// Tags the kind has with another config, and how to get each (`late`: `set late: side-output in its
    /// config`).
    pub elsewhere: Vec<(String, String)>,
}

/// What resolving a spec knows of its operators' kinds. The job manager knows what task managers reported of
/// their kinds (name, role, state): only [`KindCatalog::info`]. A task manager runs each kind's own declaration:
/// it checks configs and works out columns, side outputs and event time, so that every check a kind declares
/// runs before anything is deployed (the job manager asks a task manager to check a spec it accepted).
pub trait KindCatalog: Sync {
    /// What `kind` declares of itself, if the catalog knows the kind.
    fn info(&self, kind: &str) -> Option<&KindInfo>;
    /// The names of every kind it knows, sorted.
    fn names(&self) -> Vec<&str>;
    /// Checks an operator's config, naming the field at fault (nothing where it cannot run the declaration).
    fn check_config(&self, _kind: &str, _config: &OperatorConfig) -> Result<(), ConfigFieldError> {
        Ok(())
    }
    /// The side outputs an operator of `kind` has with `config` (`None`: not known here).
    fn side_outputs(&self, _kind: &str, _config: &OperatorConfig) -> Option<SideOutputs> {
        None
    }
    /// Why a source of `kind` with `config` emits no event timestamps, if it does not (`None` also where not
    /// known here).
    fn lacks_timestamps(&self, _kind: &str, _config: &OperatorConfig) -> Option<String> {
        None
    }
    /// The columns an operator whose kind works them out from its config emits over `inputs` (`None`: not
    /// known here).
    fn derived_output(
        &self,
        _kind: &str,
        _config: &OperatorConfig,
        _inputs: &[Vec<Column>],
    ) -> Option<Result<Vec<Column>, ConfigFieldError>> {
        None
    }
    /// Checks the input columns `config` names against what the input emits (`None`: nothing to check, or not
    /// known here).
    fn check_input(
        &self,
        _kind: &str,
        _config: &OperatorConfig,
        _input: &[Column],
    ) -> Option<Result<(), ConfigFieldError>> {
        None
    }
}

/// Kinds as reported, and nothing more: what the job manager resolves with.
impl KindCatalog for [KindInfo] {
    fn info(&self, kind: &str) -> Option<&KindInfo> {
        self.iter().find(|k| k.kind == kind)
    }

    fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.iter().map(|k| k.kind.as_str()).collect();
        names.sort_unstable();
        names
    }
}

impl KindCatalog for Vec<KindInfo> {
    fn info(&self, kind: &str) -> Option<&KindInfo> {
        self.as_slice().info(kind)
    }

    fn names(&self) -> Vec<&str> {
        self.as_slice().names()
    }
}

impl From<Role> for pb::KindRole {
    fn from(r: Role) -> Self {
        match r {
            Role::Source => pb::KindRole::Source,
            Role::Operator => pb::KindRole::Operator,
            Role::TwoInput => pb::KindRole::TwoInput,
            Role::Sink => pb::KindRole::Sink,
        }
    }
}

impl From<StateClass> for pb::StateKind {
    fn from(k: StateClass) -> Self {
        match k {
            StateClass::Value => pb::StateKind::Value,
            StateClass::List => pb::StateKind::List,
            StateClass::Map => pb::StateKind::Map,
            StateClass::Reducing => pb::StateKind::Reducing,
            StateClass::Aggregating => pb::StateKind::Aggregating,
            StateClass::OperatorList => pb::StateKind::OperatorList,
            StateClass::Union => pb::StateKind::Union,
            StateClass::Broadcast => pb::StateKind::Broadcast,
        }
    }
}

/// A kind as a task manager reports it at registration.
impl From<&KindInfo> for pb::OperatorKindInfo {
    fn from(k: &KindInfo) -> Self {
        let signature = k.signature.as_ref();
        pb::OperatorKindInfo {
            kind: k.kind.clone(),
            version: k.version.clone(),
            role: pb::KindRole::from(k.role) as i32,
            keyed: k.keyed,
            needs_event_time: k.needs_event_time,
            doc: k.doc.clone(),
            config_fields: k
                .fields
                .iter()
                .map(|f| pb::ConfigField { name: f.name.clone(), doc: f.doc.clone(), shapes_state: f.shapes_state })
                .collect(),
            state_signature: signature.map(|s| s.fingerprint.clone()).unwrap_or_default(),
            state_signature_text: signature.map(|s| s.text.clone()).unwrap_or_default(),
            key_serializer: signature.and_then(|s| s.key.as_ref()).map(Into::into),
            state_serializers: signature.map(|s| s.states.iter().map(Into::into).collect()).unwrap_or_default(),
            input_columns: k.input_columns.iter().map(Into::into).collect(),
            output_mode: match &k.output {
                OutputSchema::Undeclared => pb::OutputMode::Undeclared,
                OutputSchema::Columns(_) => pb::OutputMode::Columns,
                OutputSchema::SameAsInput => pb::OutputMode::SameAsInput,
                OutputSchema::FromConfig => pb::OutputMode::FromConfig,
            } as i32,
            output_columns: match &k.output {
                OutputSchema::Columns(c) => c.iter().map(Into::into).collect(),
                _ => Vec::new(),
            },
            states: k
                .states
                .iter()
                .map(|s| pb::StateDeclaration {
                    name: s.name.clone(),
                    kind: pb::StateKind::from(s.kind) as i32,
                    type_name: s.type_name.clone(),
                })
                .collect(),
        }
    }
}

/// A reported kind the job manager cannot take: a role or state kind it does not know (a newer task manager's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("operator kind {kind:?}: {message}")]
pub struct UnknownKindInfo {
    /// The kind reported.
    pub kind: String,
    /// What is unknown in it.
    pub message: String,
}

impl TryFrom<&pb::OperatorKindInfo> for KindInfo {
    type Error = UnknownKindInfo;

    fn try_from(k: &pb::OperatorKindInfo) -> Result<Self, UnknownKindInfo> {
        let unknown = |message: String| UnknownKindInfo { kind: k.kind.clone(), message };
        let role = match pb::KindRole::try_from(k.role) {
            Ok(pb::KindRole::Source) => Role::Source,
            Ok(pb::KindRole::Operator) => Role::Operator,
            Ok(pb::KindRole::TwoInput) => Role::TwoInput,
            Ok(pb::KindRole::Sink) => Role::Sink,
            _ => return Err(unknown(format!("unknown role {}", k.role))),
        };
        let states = k
            .states
            .iter()
            .map(|s| {
                let kind = match pb::StateKind::try_from(s.kind) {
                    Ok(pb::StateKind::Value) => StateClass::Value,
                    Ok(pb::StateKind::List) => StateClass::List,
                    Ok(pb::StateKind::Map) => StateClass::Map,
                    Ok(pb::StateKind::Reducing) => StateClass::Reducing,
                    Ok(pb::StateKind::Aggregating) => StateClass::Aggregating,
                    Ok(pb::StateKind::OperatorList) => StateClass::OperatorList,
                    Ok(pb::StateKind::Union) => StateClass::Union,
                    Ok(pb::StateKind::Broadcast) => StateClass::Broadcast,
                    _ => return Err(unknown(format!("state {:?} of unknown kind {}", s.name, s.kind))),
                };
                Ok(DeclaredState { name: s.name.clone(), kind, type_name: s.type_name.clone() })
            })
            .collect::<Result<_, _>>()?;
        let output = match pb::OutputMode::try_from(k.output_mode) {
            Ok(pb::OutputMode::Columns) => OutputSchema::Columns(k.output_columns.iter().map(Column::from).collect()),
            Ok(pb::OutputMode::SameAsInput) => OutputSchema::SameAsInput,
            Ok(pb::OutputMode::FromConfig) => OutputSchema::FromConfig,
            Ok(pb::OutputMode::Undeclared) => OutputSchema::Undeclared,
            Err(_) => return Err(unknown(format!("unknown output mode {}", k.output_mode))),
        };
        Ok(KindInfo {
            kind: k.kind.clone(),
            role,
            keyed: k.keyed,
            version: k.version.clone(),
            doc: k.doc.clone(),
            fields: k
                .config_fields
                .iter()
                .map(|f| FieldInfo { name: f.name.clone(), doc: f.doc.clone(), shapes_state: f.shapes_state })
                .collect(),
            states,
            signature: (!k.state_signature.is_empty()).then(|| KindSignature {
                fingerprint: k.state_signature.clone(),
                text: k.state_signature_text.clone(),
                key: k.key_serializer.clone().map(Into::into),
                states: k.state_serializers.iter().cloned().map(Into::into).collect(),
            }),
            input_columns: k.input_columns.iter().map(Column::from).collect(),
            output,
            needs_event_time: k.needs_event_time,
        })
    }
}
