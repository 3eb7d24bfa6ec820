//! Avro records as Weir rows (`format: avro` of the `kafka` source and `kafka-sink`): a record schema of flat
//! fields, each a primitive or the union of null and one, read with `apache-avro` and checked at submission, so
//! that the task manager's decoder and encoder only meet the types they handle.

use weir_common::job::schema::Column;

/// The Avro type of a field, and the column type it is read as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AvroKind {
    /// `boolean`: `bool`.
    Boolean,
    /// `int`: `int32`.
    Int,
    /// `long`: `int64`.
    Long,
    /// `long` with logical type `timestamp-millis`: `timestamp_ms`.
    TimestampMillis,
    /// `float`: `float32`.
    Float,
    /// `double`: `float64`.
    Double,
    /// `string`: `utf8`.
    String,
    /// `bytes`: `binary`.
    Bytes,
}

impl AvroKind {
    /// The column type a field of this kind is read as.
    pub fn column_type(self) -> &'static str {
        match self {
            AvroKind::Boolean => "bool",
            AvroKind::Int => "int32",
            AvroKind::Long => "int64",
            AvroKind::TimestampMillis => "timestamp_ms",
            AvroKind::Float => "float32",
            AvroKind::Double => "float64",
            AvroKind::String => "utf8",
            AvroKind::Bytes => "binary",
        }
    }
}

/// One field of a record schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AvroField {
    /// Its name, which is the column's.
    pub name: String,
    /// Its type.
    pub kind: AvroKind,
    /// For a union with null: the index of the null branch (0 in `["null", T]`, 1 in `[T, "null"]`).
    pub null_branch: Option<u8>,
}

/// How a record value frames its Avro body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AvroWire {
    /// The body alone (Flink's `avro` format).
    Plain,
    /// Confluent's wire format: a zero byte and the schema's 4-byte big-endian registry id, then the body. With an
    /// id, a record framed with another id is malformed (read: not written by this schema) and a written record
    /// carries it; without one, any id is read and 0 is written.
    Confluent(Option<u32>),
}

/// A record schema, as fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AvroSchema {
    /// The schema's text, as given.
    pub text: String,
    /// Its fields, in order.
    pub fields: Vec<AvroField>,
}

/// An Avro schema that is not a record of flat fields of the types read.
#[derive(Debug, thiserror::Error)]
pub enum AvroSchemaError {
    /// Not an Avro schema at all.
    #[error("not an Avro schema: {0}")]
    NotAvro(#[source] apache_avro::Error),
    /// A schema of another type than a record.
    #[error("the schema must be a record")]
    NotARecord,
    /// A field of a type that is not read.
    #[error(
        "field {field:?}: Avro type {schema:?} is not read (known: boolean, int, long, timestamp-millis, float, \
         double, string, bytes, and a union of null with one of them)"
    )]
    Unsupported {
        /// The field.
        field: String,
        /// Its type, in Avro's canonical form.
        schema: String,
    },
    /// A record without fields.
    #[error("the record must have at least one field")]
    NoFields,
}

impl AvroSchema {
    /// Reads a record schema of flat fields; anything else is an error saying which field and why.
    pub fn parse(text: &str) -> Result<AvroSchema, AvroSchemaError> {
        use apache_avro::Schema;
        let schema = Schema::parse_str(text).map_err(AvroSchemaError::NotAvro)?;
        let Schema::Record(record) = schema else {
            return Err(AvroSchemaError::NotARecord);
        };
        let mut fields = Vec::with_capacity(record.fields.len());
        for f in &record.fields {
            let unsupported =
                || AvroSchemaError::Unsupported { field: f.name.clone(), schema: f.schema.canonical_form() };
            let (kind, null_branch) = match &f.schema {
                Schema::Union(u) => {
                    let v = u.variants();
                    match v {
                        [Schema::Null, t] => (kind_of(t).ok_or_else(unsupported)?, Some(0)),
                        [t, Schema::Null] => (kind_of(t).ok_or_else(unsupported)?, Some(1)),
                        _ => return Err(unsupported()),
                    }
                }
                t => (kind_of(t).ok_or_else(unsupported)?, None),
            };
            fields.push(AvroField { name: f.name.clone(), kind, null_branch });
        }
        if fields.is_empty() {
            return Err(AvroSchemaError::NoFields);
        }
        Ok(AvroSchema { text: text.to_string(), fields })
    }

    /// The columns the fields are read as.
    pub fn columns(&self) -> Vec<Column> {
        self.fields.iter().map(|f| Column::new(&f.name, f.kind.column_type(), f.null_branch.is_some())).collect()
    }
}

fn kind_of(t: &apache_avro::Schema) -> Option<AvroKind> {
    use apache_avro::Schema;
    Some(match t {
        Schema::Boolean => AvroKind::Boolean,
        Schema::Int => AvroKind::Int,
        Schema::Long => AvroKind::Long,
        Schema::TimestampMillis => AvroKind::TimestampMillis,
        Schema::Float => AvroKind::Float,
        Schema::Double => AvroKind::Double,
        Schema::String => AvroKind::String,
        Schema::Bytes => AvroKind::Bytes,
        _ => return None,
    })
}

/// `avro_wire` and `avro_schema_id` of a config: the framing, or what is wrong with the field named.
pub fn parse_wire(wire: Option<&str>, schema_id: Option<&str>) -> Result<AvroWire, (&'static str, String)> {
    let id = match schema_id.map(str::trim) {
        None => None,
        Some(s) => Some(
            s.parse::<u32>()
                .map_err(|_| ("avro_schema_id", format!("expected a schema registry id (0..2^32), got {s:?}")))?,
        ),
    };
    match (wire.map(str::trim), id) {
        (None | Some("plain"), None) => Ok(AvroWire::Plain),
        (None | Some("plain"), Some(_)) => Err(("avro_schema_id", "only with avro_wire: confluent".into())),
        (Some("confluent"), id) => Ok(AvroWire::Confluent(id)),
        (Some(other), _) => Err(("avro_wire", format!("expected plain or confluent, got {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_records_are_read_and_other_shapes_are_refused_naming_the_field() {
        let s = AvroSchema::parse(
            r#"{"type":"record","name":"Bid","fields":[
                {"name":"auction","type":"long"},
                {"name":"bidder","type":["null","string"]},
                {"name":"price","type":["double","null"]},
                {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
                {"name":"ok","type":"boolean"},{"name":"n","type":"int"},{"name":"f","type":"float"},
                {"name":"raw","type":"bytes"}]}"#,
        )
        .unwrap();
        let cols: Vec<(String, String, bool)> =
            s.columns().into_iter().map(|c| (c.name, c.data_type, c.nullable)).collect();
        let want = [
            ("auction", "int64", false),
            ("bidder", "utf8", true),
            ("price", "float64", true),
            ("at", "timestamp_ms", false),
            ("ok", "bool", false),
            ("n", "int32", false),
            ("f", "float32", false),
            ("raw", "binary", false),
        ];
        assert_eq!(cols, want.map(|(n, t, b)| (n.to_string(), t.to_string(), b)));
        assert_eq!(s.fields[1].null_branch, Some(0));
        assert_eq!(s.fields[2].null_branch, Some(1));

        let nested =
            r#"{"type":"record","name":"R","fields":[{"name":"tags","type":{"type":"array","items":"string"}}]}"#;
        assert!(AvroSchema::parse(nested).unwrap_err().to_string().contains("field \"tags\""));
        let union3 = r#"{"type":"record","name":"R","fields":[{"name":"u","type":["null","int","string"]}]}"#;
        assert!(AvroSchema::parse(union3).unwrap_err().to_string().contains("field \"u\""));
        assert!(AvroSchema::parse(r#""long""#).unwrap_err().to_string().contains("must be a record"));
        assert!(AvroSchema::parse("{nope").unwrap_err().to_string().contains("not an Avro schema"));
    }

    #[test]
    fn the_wire_format_and_its_schema_id_are_checked() {
        assert_eq!(parse_wire(None, None), Ok(AvroWire::Plain));
        assert_eq!(parse_wire(Some("confluent"), None), Ok(AvroWire::Confluent(None)));
        assert_eq!(parse_wire(Some("confluent"), Some("42")), Ok(AvroWire::Confluent(Some(42))));
        assert_eq!(parse_wire(Some("plain"), Some("42")).unwrap_err().0, "avro_schema_id");
        assert_eq!(parse_wire(Some("confluent"), Some("-1")).unwrap_err().0, "avro_schema_id");
        assert_eq!(parse_wire(Some("xml"), None).unwrap_err().0, "avro_wire");
    }
}
