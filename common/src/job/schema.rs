//! Declared record schemas: the columns an operator kind needs from its input and the ones it emits, and the
//! columns a spec declares for a source, so the job manager checks every edge of a job before it runs (records
//! travel as Arrow batches of these columns; the runtime's own, such as the event time, are implicit).

use serde::{Deserialize, Serialize};

/// The column types a declaration may name: Arrow's, by a short name.
pub const COLUMN_TYPES: &[&str] =
    &["bool", "int32", "int64", "uint32", "uint64", "float32", "float64", "utf8", "binary", "timestamp_ms"];

/// One declared column.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Column {
    /// Its name.
    pub name: String,
    /// Its type, one of [`COLUMN_TYPES`].
    #[serde(rename = "type")]
    pub data_type: String,
    /// Whether it may hold nulls.
    #[serde(default)]
    pub nullable: bool,
}

impl Column {
    /// A column of `name` and `data_type`.
    pub fn new(name: &str, data_type: &str, nullable: bool) -> Self {
        Column { name: name.into(), data_type: data_type.into(), nullable }
    }
}

impl From<&Column> for weir_proto::ColumnSpec {
    fn from(c: &Column) -> Self {
        weir_proto::ColumnSpec { name: c.name.clone(), r#type: c.data_type.clone(), nullable: c.nullable }
    }
}

impl From<&weir_proto::ColumnSpec> for Column {
    fn from(c: &weir_proto::ColumnSpec) -> Self {
        Column::new(&c.name, &c.r#type, c.nullable)
    }
}

/// What an operator kind emits.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutputSchema {
    /// Not declared: nothing downstream is checked, unless the spec declares it (`schema:`).
    #[default]
    Undeclared,
    /// These columns.
    Columns(Vec<Column>),
    /// The columns of its input, as they are (filters, pass-through).
    SameAsInput,
    /// Worked out from its config and its input's columns (the kind's declaration works them out: `project`,
    /// `filter`).
    FromConfig,
}

impl OutputSchema {
    /// How the output is declared, as `weir kinds` names it: undeclared, columns, same-as-input or from-config.
    pub fn mode(&self) -> &'static str {
        match self {
            OutputSchema::Undeclared => "undeclared",
            OutputSchema::Columns(_) => "columns",
            OutputSchema::SameAsInput => "same-as-input",
            OutputSchema::FromConfig => "from-config",
        }
    }
}

/// The key/value shape the built-in kinds emit: a binary key and a value of `value_type`.
pub fn key_value(value_type: &str) -> Vec<Column> {
    vec![Column::new("key", "binary", false), Column::new("value", value_type, true)]
}

/// The key column every keyed operator's input needs.
pub fn key_column() -> Column {
    Column::new("key", "binary", false)
}

/// A column declaration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ColumnError {
    /// A column with an empty (or blank) name.
    #[error("a column needs a name")]
    NoName,
    /// A name of the runtime's (starting with `_`).
    #[error("column {0:?}: names starting with '_' are the runtime's")]
    Reserved(String),
    /// A type that is neither one of [`COLUMN_TYPES`] nor a decimal.
    #[error("column {name:?}: unknown type {data_type:?} (known: {}, decimal(p,s))", COLUMN_TYPES.join(", "))]
    UnknownType {
        /// The column.
        name: String,
        /// Its type, as declared.
        data_type: String,
    },
    /// A name declared more than once.
    #[error("column {0:?} is declared twice")]
    Duplicate(String),
}

/// Checks a declaration: known types, one column per name, no name of the runtime's (`_…`). The error names the
/// column.
pub fn validate_columns(columns: &[Column]) -> Result<(), ColumnError> {
    let mut seen = std::collections::BTreeSet::new();
    for c in columns {
        if c.name.trim().is_empty() {
            return Err(ColumnError::NoName);
        }
        if c.name.starts_with('_') {
            return Err(ColumnError::Reserved(c.name.clone()));
        }
        if !COLUMN_TYPES.contains(&c.data_type.as_str()) && parse_decimal_type(&c.data_type).is_none() {
            return Err(ColumnError::UnknownType { name: c.name.clone(), data_type: c.data_type.clone() });
        }
        if !seen.insert(c.name.as_str()) {
            return Err(ColumnError::Duplicate(c.name.clone()));
        }
    }
    Ok(())
}

/// Why an input does not have what its consumer needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// The input has no column of that name.
    Missing(Column),
    /// The input has it, of another type.
    Type {
        /// What the consumer needs.
        needed: Column,
        /// The input's type.
        found: String,
    },
}

impl Mismatch {
    /// The column concerned.
    pub fn column(&self) -> &str {
        match self {
            Mismatch::Missing(c) | Mismatch::Type { needed: c, .. } => &c.name,
        }
    }
}

/// The first column of `needed` that `available` lacks or has with another type.
pub fn first_mismatch(needed: &[Column], available: &[Column]) -> Option<Mismatch> {
    needed.iter().find_map(|n| match available.iter().find(|a| a.name == n.name) {
        None => Some(Mismatch::Missing(n.clone())),
        Some(a) if a.data_type != n.data_type => Some(Mismatch::Type { needed: n.clone(), found: a.data_type.clone() }),
        Some(_) => None,
    })
}

/// The largest decimal precision (Arrow's Decimal128).
pub const MAX_DECIMAL_PRECISION: u8 = 38;

/// `decimal(p,s)` as a precision (1 to 38) and a scale (0 to p).
pub fn parse_decimal_type(t: &str) -> Option<(u8, i8)> {
    let inner = t.strip_prefix("decimal(")?.strip_suffix(')')?;
    let (p, s) = inner.split_once(',')?;
    let (p, s): (u8, i8) = (p.trim().parse().ok()?, s.trim().parse().ok()?);
    (1..=MAX_DECIMAL_PRECISION).contains(&p).then_some(())?;
    (0..=p as i8).contains(&s).then_some((p, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mismatches_name_the_column() {
        let have = key_value("binary");
        assert_eq!(first_mismatch(&key_value("binary"), &have), None);
        assert_eq!(first_mismatch(&[key_column()], &have), None);
        let m = first_mismatch(&key_value("int64"), &have).unwrap();
        assert_eq!(m, Mismatch::Type { needed: Column::new("value", "int64", true), found: "binary".into() });
        let m = first_mismatch(&[Column::new("price", "float64", false)], &have).unwrap();
        assert_eq!(m.column(), "price");
        assert!(matches!(m, Mismatch::Missing(_)));
    }

    #[test]
    fn declarations_are_checked() {
        assert!(validate_columns(&key_value("int64")).is_ok());
        let e = validate_columns(&[Column::new("price", "decimal", false)]).unwrap_err().to_string();
        assert!(e.contains("price") && e.contains("decimal"), "{e}");
        let reserved = validate_columns(&[Column::new("_event_time", "int64", false)]).unwrap_err();
        assert!(reserved.to_string().contains("runtime"));
        assert!(validate_columns(&[key_column(), key_column()]).unwrap_err().to_string().contains("twice"));
    }
}
