//! Serializer evolution: whether a new serializer reads what the snapshot of an old one wrote ([`resolve`]), and
//! the rewrite of stored values when it needs one ([`Migrator`]).
//!
//! | format | evolvable | compatible when |
//! |---|---|---|
//! | `signature` (Weir's built-in codecs and users' own `StateCodec`s) | no | the type signatures' structure is equal |
//! | `bincode` (serde) | no | the type signatures' structure is equal |
//! | `avro` | yes | Avro's schema resolution reads the old schema with the new one (added fields with defaults, removed fields, promotions, aliases); values are migrated unless only docs or aliases changed |
//! | `protobuf` | yes | every field number both messages use has the same type and cardinality, in nested messages too (prost reads the old bytes as they are) |
//! | `opaque` (a codec that declares nothing) | — | not checked: the state's type signature is all there is |
//!
//! The rules are the ecosystems' own: `apache-avro`'s schema compatibility and resolution for Avro, `prost-reflect`
//! descriptors for Protobuf. The snapshots themselves are plain data in `weir_common::state::serializer`, which the job
//! manager reads without linking either crate: it has a task manager resolve a savepoint's snapshots.

use apache_avro::schema_compatibility::SchemaCompatibility;
use apache_avro::Schema;
use prost_reflect::{DescriptorPool, FieldDescriptor, Kind, MessageDescriptor};
use std::collections::HashSet;
use weir_common::state::serializer::{
    Resolution, SerializerJudge, SerializerSnapshot, FORMAT_AVRO, FORMAT_BINCODE, FORMAT_OPAQUE, FORMAT_PROTOBUF,
    FORMAT_SIGNATURE,
};

/// Why serializers or stored values cannot be evolved: the reason `savepoint check` and a failed restore show.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvolutionError {
    /// A snapshot's schema does not parse or decode.
    #[error("{0}")]
    Schema(String),
    /// The new serializer cannot read what the old one wrote.
    #[error("{0}")]
    Incompatible(String),
    /// A stored value does not read with the old schema, or its rewrite does not write with the new one.
    #[error("{0}")]
    Value(String),
}

/// An Avro serializer's snapshot: its schema.
pub fn avro_snapshot(schema: &Schema) -> SerializerSnapshot {
    let root = schema
        .name()
        .map(|n| n.fullname(None))
        .unwrap_or_else(|| format!("{:?}", apache_avro::schema::SchemaKind::from(schema)));
    let json = serde_json::to_string(schema).unwrap_or_else(|_| schema.canonical_form());
    SerializerSnapshot { format: FORMAT_AVRO.into(), version: 1, root, schema: json }
}

/// A Protobuf serializer's snapshot: the message and the descriptors of its files.
pub fn protobuf_snapshot(message: &MessageDescriptor) -> SerializerSnapshot {
    SerializerSnapshot {
        format: FORMAT_PROTOBUF.into(),
        version: 1,
        root: message.full_name().to_string(),
        schema: to_hex(&message.parent_pool().encode_to_vec()),
    }
}

/// The schema as a person reads it: Avro's JSON, the bincode signature; for Protobuf the message's fields.
pub fn schema_text(snapshot: &SerializerSnapshot) -> String {
    if snapshot.format == FORMAT_PROTOBUF {
        return match protobuf_message(snapshot) {
            Ok(m) => describe_message(&m),
            Err(e) => e.to_string(),
        };
    }
    snapshot.schema.clone()
}

/// The formats' own rules as a [`SerializerJudge`] (what a task manager answers the job manager with).
pub struct FormatRules;

impl SerializerJudge for FormatRules {
    fn resolve(&self, written: &SerializerSnapshot, reading: &SerializerSnapshot) -> Resolution {
        resolve(written, reading)
    }

    fn schema_text(&self, snapshot: &SerializerSnapshot) -> String {
        schema_text(snapshot)
    }
}

/// Resolves a new serializer (`new`) against the snapshot of the one that wrote the state (`old`).
pub fn resolve(old: &SerializerSnapshot, new: &SerializerSnapshot) -> Resolution {
    if old.format != new.format {
        return Resolution::Incompatible(format!(
            "written as {} and now read as {}; a state's serialization format cannot change",
            old.describe(),
            new.describe()
        ));
    }
    if old.version > new.version {
        return Resolution::Incompatible(format!(
            "written by a newer {} serializer snapshot (version {}) than this binary knows (version {})",
            old.format, old.version, new.version
        ));
    }
    match old.format.as_str() {
        FORMAT_OPAQUE => Resolution::AsIs,
        FORMAT_SIGNATURE | FORMAT_BINCODE if old.schema == new.schema => Resolution::AsIs,
        FORMAT_SIGNATURE | FORMAT_BINCODE => Resolution::Incompatible(format!(
            "{} is not evolvable and the type changed: {}",
            old.format,
            first_difference(&old.schema, &new.schema)
        )),
        FORMAT_AVRO => resolve_avro(old, new),
        FORMAT_PROTOBUF => resolve_protobuf(old, new),
        other => Resolution::Incompatible(format!("unknown serializer format {other:?}")),
    }
}

/// Where two canonical signature texts first differ, as `old … / new …` around the first differing character.
fn first_difference(old: &str, new: &str) -> String {
    let at = old.bytes().zip(new.bytes()).take_while(|(a, b)| a == b).count();
    let start = old[..at].rfind(['{', ',', '(', '<']).map_or(0, |i| i + 1);
    let around = |s: &str| {
        let end = s[at..].find(['}', ',', ')', '>']).map_or(s.len(), |i| at + i);
        s.get(start.min(end)..end).unwrap_or("").to_string()
    };
    format!("was `{}`, is now `{}`", around(old), around(new))
}

fn parse_avro(s: &SerializerSnapshot) -> Result<Schema, EvolutionError> {
    Schema::parse_str(&s.schema)
        .map_err(|e| EvolutionError::Schema(format!("the Avro schema of {} does not parse: {e}", s.describe())))
}

fn resolve_avro(old: &SerializerSnapshot, new: &SerializerSnapshot) -> Resolution {
    let (writer, reader) = match (parse_avro(old), parse_avro(new)) {
        (Ok(w), Ok(r)) => (w, r),
        (Err(e), _) | (_, Err(e)) => return Resolution::Incompatible(e.to_string()),
    };
    if let Err(e) = SchemaCompatibility::can_read(&writer, &reader) {
        return Resolution::Incompatible(format!("Avro schema resolution: {}", avro_error_chain(&e)));
    }
    if writer.canonical_form() == reader.canonical_form() {
        // Parsing Canonical Form drops docs, aliases and defaults: the encoding is the same.
        if old.schema == new.schema {
            Resolution::AsIs
        } else {
            Resolution::Reconfigured
        }
    } else {
        Resolution::AfterMigration
    }
}

/// An Avro compatibility error with its causes (which field, which type).
fn avro_error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// Rewrites stored values from the schema a state was written with to the new serializer's.
pub struct Migrator {
    writer: Schema,
    reader: Schema,
    /// For a record of primitive fields: the rewrite compiled to byte copies, conversions and defaults.
    plan: Option<RecordPlan>,
    /// One line naming both schemas, for progress logs and errors.
    pub description: String,
}

/// A primitive Avro type as it is laid out in a datum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prim {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
}

impl Prim {
    fn of(schema: &Schema) -> Option<Prim> {
        Some(match schema {
            Schema::Null => Prim::Null,
            Schema::Boolean => Prim::Boolean,
            Schema::Int => Prim::Int,
            Schema::Long => Prim::Long,
            Schema::Float => Prim::Float,
            Schema::Double => Prim::Double,
            Schema::Bytes => Prim::Bytes,
            Schema::String => Prim::String,
            _ => return None,
        })
    }
}

/// How one field of the new schema is written.
#[derive(Clone, Debug)]
enum FieldStep {
    /// The old field `i`'s bytes as they are (the same type, or a promotion with the same encoding: int to long,
    /// string to bytes and back).
    Copy(usize),
    /// The old field `i`, bytes, as a string: the same encoding, if the bytes are UTF-8.
    CopyUtf8(usize),
    /// The old field `i`, an int or long, as a float or double.
    VarintTo(usize, Prim),
    /// The old field `i`, a float, as a double.
    FloatToDouble(usize),
    /// The field's default, encoded.
    Default(Vec<u8>),
}

/// The compiled rewrite of a record of primitive fields: the old fields in order, the new fields' steps.
struct RecordPlan {
    old: Vec<Prim>,
    steps: Vec<FieldStep>,
}

fn read_varint(b: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let (&byte, rest) = b.split_first()?;
        *b = rest;
        v |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn zigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

impl RecordPlan {
    /// The plan from `writer` to `reader` when both are records of primitive fields and every new field is an
    /// old one (same type or a promotion) or has a default; `None` otherwise (the general path then applies).
    fn compile(writer: &Schema, reader: &Schema) -> Option<RecordPlan> {
        let (Schema::Record(w), Schema::Record(r)) = (writer, reader) else { return None };
        let old: Vec<Prim> = w.fields.iter().map(|f| Prim::of(&f.schema)).collect::<Option<_>>()?;
        let mut steps = Vec::with_capacity(r.fields.len());
        for f in &r.fields {
            let to = Prim::of(&f.schema)?;
            let names = std::iter::once(&f.name).chain(f.aliases.iter().flatten());
            let found = names.filter_map(|n| w.fields.iter().position(|wf| &wf.name == n)).next();
            let step = match found {
                Some(i) => match (old[i], to) {
                    (a, b) if a == b => FieldStep::Copy(i),
                    (Prim::Int, Prim::Long) | (Prim::String, Prim::Bytes) => FieldStep::Copy(i),
                    (Prim::Bytes, Prim::String) => FieldStep::CopyUtf8(i),
                    (Prim::Int | Prim::Long, Prim::Float | Prim::Double) => FieldStep::VarintTo(i, to),
                    (Prim::Float, Prim::Double) => FieldStep::FloatToDouble(i),
                    _ => return None,
                },
                None => {
                    let value = apache_avro::types::Value::from(f.default.clone()?).resolve(&f.schema).ok()?;
                    FieldStep::Default(apache_avro::to_avro_datum(&f.schema, value).ok()?)
                }
            };
            steps.push(step);
        }
        Some(RecordPlan { old, steps })
    }

    /// Appends `full` (a datum in the old schema) rewritten to `out`.
    fn apply(&self, full: &[u8], out: &mut Vec<u8>) -> Result<(), EvolutionError> {
        let truncated =
            || EvolutionError::Value("a stored value does not read with the old schema: it is truncated".into());
        let mut datum = full;
        // The byte span of each old field in `full`.
        let mut spans: smallvec::SmallVec<[(usize, usize); 16]> = smallvec::SmallVec::new();
        for p in &self.old {
            let from = full.len() - datum.len();
            match p {
                Prim::Null => {}
                Prim::Boolean => datum = datum.get(1..).ok_or_else(truncated)?,
                Prim::Int | Prim::Long => {
                    read_varint(&mut datum).ok_or_else(truncated)?;
                }
                Prim::Float => datum = datum.get(4..).ok_or_else(truncated)?,
                Prim::Double => datum = datum.get(8..).ok_or_else(truncated)?,
                Prim::Bytes | Prim::String => {
                    let len = usize::try_from(zigzag(read_varint(&mut datum).ok_or_else(truncated)?))
                        .map_err(|_| truncated())?;
                    datum = datum.get(len..).ok_or_else(truncated)?;
                }
            }
            spans.push((from, full.len() - datum.len()));
        }
        if !datum.is_empty() {
            return Err(EvolutionError::Value(
                "a stored value does not read with the old schema: bytes are left after its last field".into(),
            ));
        }
        for step in &self.steps {
            match step {
                FieldStep::Copy(i) => out.extend_from_slice(&full[spans[*i].0..spans[*i].1]),
                FieldStep::CopyUtf8(i) => {
                    let field = &full[spans[*i].0..spans[*i].1];
                    let mut body = field;
                    read_varint(&mut body).ok_or_else(truncated)?;
                    std::str::from_utf8(body).map_err(|_| {
                        EvolutionError::Value("a stored value's bytes are not UTF-8 and cannot become a string".into())
                    })?;
                    out.extend_from_slice(field);
                }
                FieldStep::VarintTo(i, to) => {
                    let mut b = &full[spans[*i].0..spans[*i].1];
                    let v = zigzag(read_varint(&mut b).ok_or_else(truncated)?);
                    match to {
                        Prim::Float => out.extend_from_slice(&(v as f32).to_le_bytes()),
                        _ => out.extend_from_slice(&(v as f64).to_le_bytes()),
                    }
                }
                FieldStep::FloatToDouble(i) => {
                    let b: [u8; 4] = full[spans[*i].0..spans[*i].1].try_into().map_err(|_| truncated())?;
                    out.extend_from_slice(&(f32::from_le_bytes(b) as f64).to_le_bytes());
                }
                FieldStep::Default(bytes) => out.extend_from_slice(bytes),
            }
        }
        Ok(())
    }
}

impl Migrator {
    /// The migrator from `old` to `new`, `None` when the values are read as they are, or why it cannot be made.
    pub fn between(old: &SerializerSnapshot, new: &SerializerSnapshot) -> Result<Option<Migrator>, EvolutionError> {
        match resolve(old, new) {
            Resolution::AsIs | Resolution::Reconfigured => Ok(None),
            Resolution::Incompatible(why) => Err(EvolutionError::Incompatible(why)),
            Resolution::AfterMigration => {
                // Only Avro resolves to a migration.
                let writer = parse_avro(old)?;
                let reader = parse_avro(new)?;
                let description = format!("{} -> {}", old.describe(), new.describe());
                let plan = RecordPlan::compile(&writer, &reader);
                Ok(Some(Migrator { writer, reader, plan, description }))
            }
        }
    }

    /// Appends `old` (a value in the old schema) rewritten in the new schema to `out`.
    pub fn migrate(&self, old: &[u8], out: &mut Vec<u8>) -> Result<(), EvolutionError> {
        if let Some(plan) = &self.plan {
            return plan.apply(old, out);
        }
        self.migrate_values(old, out)
    }

    /// [`Migrator::migrate`] through `apache-avro`'s values: decoded, resolved, encoded (any schema).
    fn migrate_values(&self, old: &[u8], out: &mut Vec<u8>) -> Result<(), EvolutionError> {
        let mut r = old;
        let value = apache_avro::from_avro_datum(&self.writer, &mut r, Some(&self.reader))
            .map_err(|e| EvolutionError::Value(format!("a stored value does not read with the old schema: {e}")))?;
        let bytes = apache_avro::to_avro_datum(&self.reader, value)
            .map_err(|e| EvolutionError::Value(format!("a migrated value does not write with the new schema: {e}")))?;
        out.extend_from_slice(&bytes);
        Ok(())
    }
}

/// Lower-case hexadecimal of `b`.
fn to_hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

/// Why a snapshot's hex text is not bytes.
#[derive(Debug, thiserror::Error)]
enum HexError {
    #[error("odd hex length")]
    Odd,
    #[error("bad hex: {0}")]
    Digit(#[from] std::num::ParseIntError),
    #[error("bad hex: not ASCII")]
    NotAscii,
}

fn from_hex(s: &str) -> Result<Vec<u8>, HexError> {
    if !s.len().is_multiple_of(2) {
        return Err(HexError::Odd);
    }
    // The text comes from checkpoint metadata: a pair that is not two ASCII characters is refused, not sliced.
    (0..s.len()).step_by(2).map(|i| Ok(u8::from_str_radix(s.get(i..i + 2).ok_or(HexError::NotAscii)?, 16)?)).collect()
}

fn protobuf_message(s: &SerializerSnapshot) -> Result<MessageDescriptor, EvolutionError> {
    let corrupt = |why: String| EvolutionError::Schema(format!("the descriptors of {} {why}", s.describe()));
    let bytes = from_hex(&s.schema).map_err(|e| corrupt(format!("are corrupt: {e}")))?;
    let pool = DescriptorPool::decode(bytes.as_slice()).map_err(|e| corrupt(format!("do not decode: {e}")))?;
    pool.get_message_by_name(&s.root).ok_or_else(|| corrupt(format!("lack message {}", s.root)))
}

fn resolve_protobuf(old: &SerializerSnapshot, new: &SerializerSnapshot) -> Resolution {
    let (old_m, new_m) = match (protobuf_message(old), protobuf_message(new)) {
        (Ok(o), Ok(n)) => (o, n),
        (Err(e), _) | (_, Err(e)) => return Resolution::Incompatible(e.to_string()),
    };
    // Protobuf reads old bytes by field number: added and removed fields need no rewrite.
    match compare_messages(&old_m, &new_m, &mut HashSet::new(), 0) {
        Err(why) => Resolution::Incompatible(why.to_string()),
        Ok(()) => Resolution::AsIs,
    }
}

/// A field's type as the wire sees it, for messages: its kind without the message's identity.
fn field_type(f: &FieldDescriptor) -> String {
    let base = match f.kind() {
        Kind::Message(m) => format!("message {}", m.full_name()),
        Kind::Enum(e) => format!("enum {}", e.full_name()),
        k => format!("{k:?}").to_lowercase(),
    };
    if f.is_map() {
        format!("map {base}")
    } else if f.is_list() {
        format!("repeated {base}")
    } else {
        base
    }
}

/// Deepest nesting of message fields compared: the descriptors come from checkpoint metadata, and a chain of
/// a hundred thousand message types must not exhaust the job manager's stack.
const MAX_MESSAGE_NESTING: usize = 100;

/// Checks that every field number both messages use keeps its type and cardinality (nested messages too, at
/// most [`MAX_MESSAGE_NESTING`] deep).
fn compare_messages(
    old: &MessageDescriptor,
    new: &MessageDescriptor,
    seen: &mut HashSet<(String, String)>,
    depth: usize,
) -> Result<(), EvolutionError> {
    if depth > MAX_MESSAGE_NESTING {
        return Err(EvolutionError::Incompatible(format!(
            "{} nests messages more than {MAX_MESSAGE_NESTING} deep: too deep to compare",
            old.full_name()
        )));
    }
    if !seen.insert((old.full_name().to_string(), new.full_name().to_string())) {
        return Ok(());
    }
    for of in old.fields() {
        let Some(nf) = new.get_field(of.number()) else { continue };
        let same_shape = of.is_list() == nf.is_list() && of.is_map() == nf.is_map();
        let nested = match (of.kind(), nf.kind()) {
            (Kind::Message(om), Kind::Message(nm)) if same_shape => Some((om, nm)),
            (Kind::Enum(_), Kind::Enum(_)) if same_shape => None,
            (ok, nk) if same_shape && ok == nk => None,
            _ => {
                return Err(EvolutionError::Incompatible(format!(
                    "field number {} of {} was `{} {}` and is now `{} {}`; reusing a field number with another \
                     type is incompatible (give the new field a new number, and reserve {})",
                    of.number(),
                    old.full_name(),
                    field_type(&of),
                    of.name(),
                    field_type(&nf),
                    nf.name(),
                    of.number()
                )))
            }
        };
        if let Some((om, nm)) = nested {
            compare_messages(&om, &nm, seen, depth + 1)?;
        }
    }
    Ok(())
}

/// A message's fields, one per line: `2: string label`.
fn describe_message(m: &MessageDescriptor) -> String {
    let mut s = format!("message {} {{", m.full_name());
    for f in m.fields() {
        s.push_str(&format!(" {}: {} {};", f.number(), field_type(&f), f.name()));
    }
    s.push_str(" }");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn avro(json: &str) -> SerializerSnapshot {
        avro_snapshot(&Schema::parse_str(json).unwrap())
    }

    const V1: &str = r#"{"type":"record","name":"Profile","fields":[{"name":"count","type":"long"},{"name":"last","type":"string"}]}"#;

    #[test]
    fn avro_resolution_follows_avro_rules() {
        let v1 = avro(V1);
        assert_eq!(resolve(&v1, &v1), Resolution::AsIs);
        let added = avro(
            r#"{"type":"record","name":"Profile","fields":[{"name":"count","type":"long"},{"name":"last","type":"string"},{"name":"score","type":"double","default":0.5}]}"#,
        );
        assert_eq!(resolve(&v1, &added), Resolution::AfterMigration);
        let no_default = avro(
            r#"{"type":"record","name":"Profile","fields":[{"name":"count","type":"long"},{"name":"last","type":"string"},{"name":"score","type":"double"}]}"#,
        );
        match resolve(&v1, &no_default) {
            Resolution::Incompatible(why) => assert!(why.contains("score") && why.contains("default"), "{why}"),
            r => panic!("{r:?}"),
        }
        let removed = avro(r#"{"type":"record","name":"Profile","fields":[{"name":"count","type":"long"}]}"#);
        assert_eq!(resolve(&v1, &removed), Resolution::AfterMigration);
        let promoted = avro(
            r#"{"type":"record","name":"Profile","fields":[{"name":"count","type":"double"},{"name":"last","type":"string"}]}"#,
        );
        assert_eq!(resolve(&v1, &promoted), Resolution::AfterMigration);
        let demoted = avro(
            r#"{"type":"record","name":"Profile","fields":[{"name":"count","type":"int"},{"name":"last","type":"string"}]}"#,
        );
        assert!(matches!(resolve(&v1, &demoted), Resolution::Incompatible(w) if w.contains("count")));
        let documented = avro(
            r#"{"type":"record","name":"Profile","doc":"a user","fields":[{"name":"count","type":"long"},{"name":"last","type":"string"}]}"#,
        );
        assert_eq!(resolve(&v1, &documented), Resolution::Reconfigured);
        assert!(matches!(resolve(&v1, &SerializerSnapshot::signature("u64")), Resolution::Incompatible(_)));
    }

    #[test]
    fn avro_migration_fills_defaults_and_drops_removed_fields() {
        let v1 = avro(V1);
        let v2 = avro(
            r#"{"type":"record","name":"Profile","fields":[{"name":"count","type":"long"},{"name":"score","type":"double","default":0.5}]}"#,
        );
        let m = Migrator::between(&v1, &v2).unwrap().expect("a migration");
        let w = Schema::parse_str(V1).unwrap();
        let mut rec = apache_avro::types::Record::new(&w).unwrap();
        rec.put("count", 7i64);
        rec.put("last", "x");
        let old = apache_avro::to_avro_datum(&w, rec).unwrap();
        let mut out = Vec::new();
        m.migrate(&old, &mut out).unwrap();
        let r = Schema::parse_str(&v2.schema).unwrap();
        let v = apache_avro::from_avro_datum(&r, &mut out.as_slice(), None).unwrap();
        use apache_avro::types::Value;
        assert_eq!(v, Value::Record(vec![("count".into(), Value::Long(7)), ("score".into(), Value::Double(0.5))]));
        assert!(m.migrate(&[0xff], &mut out).is_err());
        assert!(Migrator::between(&v1, &v1).unwrap().is_none());
    }

    #[test]
    fn bincode_is_compatible_only_with_an_equal_signature() {
        let a = SerializerSnapshot::bincode("Person", "struct Person{age:u32,name:String}");
        let b = SerializerSnapshot::bincode("Person", "struct Person{age:u64,name:String}");
        assert_eq!(resolve(&a, &a), Resolution::AsIs);
        match resolve(&a, &b) {
            Resolution::Incompatible(why) => assert!(why.contains("age:u32") && why.contains("age:u64"), "{why}"),
            r => panic!("{r:?}"),
        }
        assert!(!a.evolvable());
    }

    #[test]
    fn weakest_of_parts() {
        assert_eq!(Resolution::AsIs.weakest(Resolution::AfterMigration), Resolution::AfterMigration);
        assert_eq!(
            Resolution::Reconfigured.weakest(Resolution::Incompatible("x".into())),
            Resolution::Incompatible("x".into())
        );
        let (u64s, strings) = (SerializerSnapshot::signature("u64"), SerializerSnapshot::signature("string"));
        assert_eq!(resolve(&u64s, &u64s), Resolution::AsIs);
        match resolve(&u64s, &strings) {
            Resolution::Incompatible(why) => assert!(why.contains("`u64`") && why.contains("`string`"), "{why}"),
            r => panic!("{r:?}"),
        }
    }

    fn pool(fields: &[(&str, u32, i32)]) -> SerializerSnapshot {
        use prost_reflect::prost_types::{field_descriptor_proto::Type, *};
        let _ = Type::String;
        let msg = DescriptorProto {
            name: Some("Session".into()),
            field: fields
                .iter()
                .map(|(n, num, ty)| FieldDescriptorProto {
                    name: Some(n.to_string()),
                    number: Some(*num as i32),
                    r#type: Some(*ty),
                    label: Some(1),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let file = FileDescriptorProto {
            name: Some("s.proto".into()),
            package: Some("t".into()),
            message_type: vec![msg],
            syntax: Some("proto3".into()),
            ..Default::default()
        };
        let pool = DescriptorPool::from_file_descriptor_set(FileDescriptorSet { file: vec![file] }).unwrap();
        protobuf_snapshot(&pool.get_message_by_name("t.Session").unwrap())
    }

    #[test]
    fn corrupt_descriptor_text_is_incompatible_not_a_panic() {
        let snapshot = |schema: &str| SerializerSnapshot {
            format: FORMAT_PROTOBUF.into(),
            version: 1,
            root: "t.M".into(),
            schema: schema.into(),
        };
        for (schema, why) in
            [("abc", "odd hex length"), ("zz", "bad hex: invalid digit"), ("aé0", "bad hex: not ASCII")]
        {
            let Resolution::Incompatible(got) = resolve(&snapshot(schema), &snapshot(schema)) else {
                panic!("{schema:?} resolved")
            };
            assert!(got.contains("are corrupt") && got.contains(why), "{schema:?}: {got}");
        }
    }

    #[test]
    fn protobuf_is_evolvable_by_field_number() {
        const UINT64: i32 = 4;
        const STRING: i32 = 9;
        const DOUBLE: i32 = 1;
        let v1 = pool(&[("count", 1, UINT64), ("label", 2, STRING)]);
        assert_eq!(resolve(&v1, &v1), Resolution::AsIs);
        let added = pool(&[("count", 1, UINT64), ("label", 2, STRING), ("seen", 3, DOUBLE)]);
        assert_eq!(resolve(&v1, &added), Resolution::AsIs);
        let renamed = pool(&[("total", 1, UINT64)]);
        assert_eq!(resolve(&v1, &renamed), Resolution::AsIs);
        let reused = pool(&[("count", 1, UINT64), ("ratio", 2, DOUBLE)]);
        match resolve(&v1, &reused) {
            Resolution::Incompatible(why) => {
                assert!(why.contains("field number 2") && why.contains("`string label`"), "{why}");
                assert!(why.contains("`double ratio`"), "{why}");
            }
            r => panic!("{r:?}"),
        }
        assert!(schema_text(&v1).contains("2: string label"), "{}", schema_text(&v1));
    }

    const WIDE: &str = r#"{"type":"record","name":"R","fields":[{"name":"a","type":"long"},{"name":"b","type":"string"},{"name":"c","type":"boolean"},{"name":"d","type":"int"},{"name":"e","type":"float"},{"name":"f","type":"bytes"}]}"#;
    const READERS: [&str; 3] = [
        r#"{"type":"record","name":"R","fields":[{"name":"e","type":"double"},{"name":"d","type":"long"},{"name":"z","type":"string","default":"zz"},{"name":"a","type":"long"},{"name":"n","type":"int","default":5}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"a","type":"long"},{"name":"b","type":"bytes"},{"name":"d","type":"double"},{"name":"c","type":"boolean"}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"f","type":"string"},{"name":"a","type":"float"},{"name":"x","type":"double","default":2.5},{"name":"y","type":"boolean","default":true}]}"#,
    ];

    proptest::proptest! {
        /// The compiled rewrite of primitive records writes exactly what apache-avro's own resolution does.
        #[test]
        fn compiled_record_rewrites_match_apache_avro(
            a: i64, b in ".{0,20}", c: bool, d: i32, e in -1e6f32..1e6f32, f in proptest::collection::vec(0u8..=255, 0..20),
            which in 0usize..3,
        ) {
            use apache_avro::types::Value;
            let w = Schema::parse_str(WIDE).unwrap();
            let datum = apache_avro::to_avro_datum(&w, Value::Record(vec![
                ("a".into(), Value::Long(a)), ("b".into(), Value::String(b)), ("c".into(), Value::Boolean(c)),
                ("d".into(), Value::Int(d)), ("e".into(), Value::Float(e)), ("f".into(), Value::Bytes(f)),
            ])).unwrap();
            let m = Migrator::between(&avro(WIDE), &avro(READERS[which])).unwrap().unwrap();
            proptest::prop_assert!(m.plan.is_some(), "reader {} compiles", which);
            let (mut fast, mut general) = (Vec::new(), Vec::new());
            let fast_ok = m.migrate(&datum, &mut fast).is_ok();
            let general_ok = m.migrate_values(&datum, &mut general).is_ok();
            proptest::prop_assert_eq!(fast_ok, general_ok, "both refuse or both write");
            proptest::prop_assert_eq!(fast, general);
            proptest::prop_assert!(m.migrate(&datum[..datum.len() - 1], &mut Vec::new()).is_err() || datum.len() == 1);
        }
    }

    /// A field renamed with an alias (which `apache-avro`'s value resolution does not follow) keeps its value.
    #[test]
    fn a_field_renamed_with_an_alias_keeps_its_value() {
        use apache_avro::types::Value;
        let old = r#"{"type":"record","name":"R","fields":[{"name":"a","type":"long"},{"name":"b","type":"int"}]}"#;
        let new = r#"{"type":"record","name":"R","fields":[{"name":"total","aliases":["a"],"type":"long"}]}"#;
        let m = Migrator::between(&avro(old), &avro(new)).unwrap().unwrap();
        let w = Schema::parse_str(old).unwrap();
        let datum = apache_avro::to_avro_datum(
            &w,
            Value::Record(vec![("a".into(), Value::Long(-9)), ("b".into(), Value::Int(4))]),
        )
        .unwrap();
        let mut out = Vec::new();
        m.migrate(&datum, &mut out).unwrap();
        let r = Schema::parse_str(new).unwrap();
        assert_eq!(
            apache_avro::from_avro_datum(&r, &mut out.as_slice(), None).unwrap(),
            Value::Record(vec![("total".into(), Value::Long(-9))])
        );
    }

    #[test]
    fn schemas_beyond_primitive_records_take_the_general_path() {
        let nested = r#"{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"array","items":"long"}}]}"#;
        let nested2 = r#"{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"array","items":"long"}},{"name":"b","type":"long","default":1}]}"#;
        let m = Migrator::between(&avro(nested), &avro(nested2)).unwrap().unwrap();
        assert!(m.plan.is_none());
        let w = Schema::parse_str(nested).unwrap();
        use apache_avro::types::Value;
        let datum =
            apache_avro::to_avro_datum(&w, Value::Record(vec![("a".into(), Value::Array(vec![Value::Long(3)]))]))
                .unwrap();
        let mut out = Vec::new();
        m.migrate(&datum, &mut out).unwrap();
        let r = Schema::parse_str(nested2).unwrap();
        assert_eq!(
            apache_avro::from_avro_datum(&r, &mut out.as_slice(), None).unwrap(),
            Value::Record(vec![("a".into(), Value::Array(vec![Value::Long(3)])), ("b".into(), Value::Long(1))])
        );
    }
}
