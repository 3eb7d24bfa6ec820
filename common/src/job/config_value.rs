//! An operator's config values, typed as the spec wrote them (text, numbers, flags, lists, maps): in memory a
//! [`ConfigValue`] (`serde_json::Value`, whose numbers keep integers exact and which kinds read straight into
//! their own types), on the wire a `pb::ConfigValue`. Nothing nested travels as JSON text.

use weir_proto as pb;

/// One value of an operator's config.
pub type ConfigValue = serde_json::Value;

/// Deepest nesting of lists and maps in one config value: as deep as a whole spec file may nest
/// (`spec::MAX_SPEC_NESTING`), so a spec sent over gRPC is held to no less than one read from a file.
pub const MAX_CONFIG_DEPTH: usize = 64;

/// A wire value that is not a config value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigValueError {
    /// Lists and maps nested past [`MAX_CONFIG_DEPTH`].
    #[error("lists and maps nest more than {MAX_CONFIG_DEPTH} levels deep, the limit")]
    TooDeep,
    /// A float that JSON and YAML cannot write (NaN or infinite).
    #[error("{0} is not a finite number")]
    NotFinite(f64),
}

/// The wire form of `value`.
pub fn to_proto(value: &ConfigValue) -> pb::ConfigValue {
    use pb::config_value::Kind;
    let kind = match value {
        ConfigValue::Null => None,
        ConfigValue::Bool(b) => Some(Kind::Flag(*b)),
        ConfigValue::Number(n) => Some(match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Kind::Int(i),
            (None, Some(u)) => Kind::Uint(u),
            _ => Kind::Float(n.as_f64().unwrap_or(f64::NAN)),
        }),
        ConfigValue::String(s) => Some(Kind::Text(s.clone())),
        ConfigValue::Array(items) => Some(Kind::List(pb::ConfigList { items: items.iter().map(to_proto).collect() })),
        ConfigValue::Object(fields) => {
            Some(Kind::Map(pb::ConfigMap { fields: fields.iter().map(|(k, v)| (k.clone(), to_proto(v))).collect() }))
        }
    };
    pb::ConfigValue { kind }
}

/// The value a wire value carries, refusing one nested too deep or holding a float JSON cannot write.
pub fn from_proto(value: &pb::ConfigValue) -> Result<ConfigValue, ConfigValueError> {
    from_proto_at(value, 0)
}

fn from_proto_at(value: &pb::ConfigValue, depth: usize) -> Result<ConfigValue, ConfigValueError> {
    use pb::config_value::Kind;
    if depth > MAX_CONFIG_DEPTH {
        return Err(ConfigValueError::TooDeep);
    }
    Ok(match &value.kind {
        None => ConfigValue::Null,
        Some(Kind::Text(s)) => ConfigValue::String(s.clone()),
        Some(Kind::Int(i)) => ConfigValue::from(*i),
        Some(Kind::Uint(u)) => ConfigValue::from(*u),
        Some(Kind::Float(f)) => {
            ConfigValue::Number(serde_json::Number::from_f64(*f).ok_or(ConfigValueError::NotFinite(*f))?)
        }
        Some(Kind::Flag(b)) => ConfigValue::Bool(*b),
        Some(Kind::List(l)) => {
            ConfigValue::Array(l.items.iter().map(|v| from_proto_at(v, depth + 1)).collect::<Result<_, _>>()?)
        }
        Some(Kind::Map(m)) => ConfigValue::Object(
            m.fields.iter().map(|(k, v)| Ok((k.clone(), from_proto_at(v, depth + 1)?))).collect::<Result<_, _>>()?,
        ),
    })
}

/// How many bytes `value` counts against a config value's limit: a text's length (as when configs were all
/// text), or the encoded size of anything else.
pub fn size(value: &pb::ConfigValue) -> usize {
    match &value.kind {
        Some(pb::config_value::Kind::Text(s)) => s.len(),
        _ => prost::Message::encoded_len(value),
    }
}

/// A spec file's YAML value that is not a config value.
#[derive(Debug, thiserror::Error)]
pub enum YamlValueError {
    /// A tagged value (`!tag x`).
    #[error("a tagged YAML value is not supported")]
    Tagged,
    /// A value JSON cannot hold (a map with keys that are not text, say).
    #[error("not a config value: {0}")]
    NotConfig(#[from] serde_json::Error),
}

/// A spec file's config value as it travels: YAML's null is empty text (as it always was); a tagged value
/// (`!tag x`) is refused, with what to write instead.
pub fn from_yaml(value: serde_yaml::Value) -> Result<ConfigValue, YamlValueError> {
    match value {
        serde_yaml::Value::Null => Ok(ConfigValue::String(String::new())),
        serde_yaml::Value::Tagged(_) => Err(YamlValueError::Tagged),
        v => Ok(serde_json::to_value(v)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_cross_the_wire_unchanged_and_integers_stay_exact() {
        for v in [
            json!("text"),
            json!(7),
            json!(-7),
            json!(u64::MAX),
            json!(9_007_199_254_740_993u64),
            json!(0.25),
            json!(true),
            json!(null),
            json!([1, "a", [false]]),
            json!({ "tumbling_ms": 1000, "nested": { "list": [1.5, null] } }),
        ] {
            assert_eq!(from_proto(&to_proto(&v)).unwrap(), v, "{v}");
        }
    }

    #[test]
    fn a_wire_value_too_deep_or_not_finite_is_refused() {
        let mut deep = pb::ConfigValue { kind: Some(pb::config_value::Kind::Int(1)) };
        for _ in 0..MAX_CONFIG_DEPTH {
            deep = pb::ConfigValue { kind: Some(pb::config_value::Kind::List(pb::ConfigList { items: vec![deep] })) };
        }
        assert!(from_proto(&deep).is_ok(), "{MAX_CONFIG_DEPTH} levels are allowed");
        let deeper = pb::ConfigValue { kind: Some(pb::config_value::Kind::List(pb::ConfigList { items: vec![deep] })) };
        assert_eq!(from_proto(&deeper), Err(ConfigValueError::TooDeep));
        let nan = pb::ConfigValue { kind: Some(pb::config_value::Kind::Float(f64::NAN)) };
        assert!(matches!(from_proto(&nan), Err(ConfigValueError::NotFinite(_))));
    }

    #[test]
    fn yaml_values_keep_their_types() {
        let yaml: serde_yaml::Value =
            serde_yaml::from_str("{ n: 3, s: x, b: true, l: [1, 2], m: { k: v }, z: }").unwrap();
        let serde_yaml::Value::Mapping(m) = yaml else { panic!("a map") };
        let get = |k: &str| from_yaml(m[k].clone()).unwrap();
        assert_eq!(get("n"), json!(3));
        assert_eq!(get("s"), json!("x"));
        assert_eq!(get("b"), json!(true));
        assert_eq!(get("l"), json!([1, 2]));
        assert_eq!(get("m"), json!({ "k": "v" }));
        assert_eq!(get("z"), json!(""), "a null is empty text, as before");
        let tagged: serde_yaml::Value = serde_yaml::from_str("!x 1").unwrap();
        assert!(from_yaml(tagged).unwrap_err().to_string().contains("tagged"));
    }
}
