//! Weir's column type names (`weir_common::job::schema::COLUMN_TYPES`, and `decimal(p,s)`) and the Arrow types
//! they stand for: how a spec's declared columns become a schema an expression is typed over, and how an
//! expression's type becomes a declared column again.

use super::error::ExprError;
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use weir_common::job::schema::{parse_decimal_type, Column};

/// The Arrow type a column type names, if it names one.
pub fn data_type(t: &str) -> Option<DataType> {
    Some(match t {
        "bool" => DataType::Boolean,
        "int32" => DataType::Int32,
        "int64" => DataType::Int64,
        "uint32" => DataType::UInt32,
        "uint64" => DataType::UInt64,
        "float32" => DataType::Float32,
        "float64" => DataType::Float64,
        "utf8" => DataType::Utf8,
        "binary" => DataType::Binary,
        "timestamp_ms" => DataType::Timestamp(TimeUnit::Millisecond, None),
        _ => {
            let (p, s) = parse_decimal_type(t)?;
            DataType::Decimal128(p, s)
        }
    })
}

/// The column type of an Arrow type, if Weir's columns can hold it.
pub fn column_type(t: &DataType) -> Option<String> {
    Some(match t {
        DataType::Boolean => "bool".into(),
        DataType::Int32 => "int32".into(),
        DataType::Int64 => "int64".into(),
        DataType::UInt32 => "uint32".into(),
        DataType::UInt64 => "uint64".into(),
        DataType::Float32 => "float32".into(),
        DataType::Float64 => "float64".into(),
        DataType::Utf8 => "utf8".into(),
        DataType::Binary => "binary".into(),
        DataType::Timestamp(TimeUnit::Millisecond, None) => "timestamp_ms".into(),
        DataType::Decimal128(p, s) => format!("decimal({p},{s})"),
        _ => return None,
    })
}

/// The Arrow schema of declared columns. The runtime's own columns (`_key_group`, …) of a type no declaration
/// names are left out: expressions do not read them.
pub fn arrow_schema(columns: &[Column]) -> Result<Schema, ExprError> {
    let mut fields = Vec::with_capacity(columns.len());
    for c in columns {
        match data_type(&c.data_type) {
            Some(t) => fields.push(Field::new(&c.name, t, c.nullable)),
            None if c.name.starts_with('_') => {}
            None => return Err(ExprError::new(format!("column {:?} has an unknown type {:?}", c.name, c.data_type))),
        }
    }
    Ok(Schema::new(fields))
}

/// The declared columns of an Arrow schema; a type Weir's columns cannot hold keeps Arrow's name for it.
pub fn columns_of(schema: &Schema) -> Vec<Column> {
    schema
        .fields()
        .iter()
        .map(|f| {
            let t = column_type(f.data_type()).unwrap_or_else(|| f.data_type().to_string());
            Column::new(f.name(), &t, f.is_nullable())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_type_round_trips() {
        for t in weir_common::job::schema::COLUMN_TYPES.iter().copied().chain(["decimal(23,3)"]) {
            let d = data_type(t).unwrap_or_else(|| panic!("{t}"));
            assert_eq!(column_type(&d).as_deref(), Some(t));
        }
        assert!(data_type("decimal(99,1)").is_none());
        assert!(column_type(&DataType::Utf8View).is_none());
    }
}
