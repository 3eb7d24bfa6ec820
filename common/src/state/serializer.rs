//! Serializer snapshots: what a state's serializer leaves in checkpoint and savepoint metadata so that a later
//! version of the job can recognise the schema the state was written with, and how a new serializer relates to
//! it ([`Resolution`]). The rules that judge them and rewrite stored values — Avro's schema resolution,
//! Protobuf's field numbers — live with the state backend (`weir_state::typed::evolution`), which links the
//! formats' crates; the job manager, which links neither, has a task manager judge a savepoint's snapshots.

use serde::{Deserialize, Serialize};

/// Format name of a codec known only by its type's signature (built-in codecs, users' own `StateCodec`s).
pub const FORMAT_SIGNATURE: &str = "signature";
/// Format name of serde values in bincode.
pub const FORMAT_BINCODE: &str = "bincode";
/// Format name of Avro datums.
pub const FORMAT_AVRO: &str = "avro";
/// Format name of Protobuf messages.
pub const FORMAT_PROTOBUF: &str = "protobuf";
/// Format name of a codec that left no snapshot.
pub const FORMAT_OPAQUE: &str = "opaque";

/// A versioned snapshot of one serializer: its format, the format's snapshot version, and the schema.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SerializerSnapshot {
    /// One of the `FORMAT_*` names.
    pub format: String,
    /// Version of the format's snapshot layout.
    pub version: u32,
    /// The type's name: the Rust type (`bincode`), the record (`avro`), the message's full
    /// name (`protobuf`).
    pub root: String,
    /// The schema: a type signature's canonical text (`bincode`), the schema's JSON (`avro`), the hex-encoded
    /// `FileDescriptorSet` holding the message (`protobuf`); empty otherwise.
    pub schema: String,
}

impl SerializerSnapshot {
    /// The snapshot of a codec known by its type's signature (`signature`: the shape's canonical text).
    pub fn signature(signature: &str) -> Self {
        SerializerSnapshot {
            format: FORMAT_SIGNATURE.into(),
            version: 1,
            root: String::new(),
            schema: signature.into(),
        }
    }

    /// The snapshot of a codec that declares nothing.
    pub fn opaque() -> Self {
        SerializerSnapshot { format: FORMAT_OPAQUE.into(), version: 1, root: String::new(), schema: String::new() }
    }

    /// A bincode serializer's snapshot: the type's name and its signature's canonical text.
    pub fn bincode(type_name: &str, signature: &str) -> Self {
        SerializerSnapshot {
            format: FORMAT_BINCODE.into(),
            version: 1,
            root: type_name.into(),
            schema: signature.into(),
        }
    }

    /// Whether the format has rules for changing a schema (an incompatible change is then refused, not a
    /// reason to drop the state).
    pub fn evolvable(&self) -> bool {
        self.format == FORMAT_AVRO || self.format == FORMAT_PROTOBUF
    }

    /// One line naming the schema: format, type and, where there is one, a short fingerprint of the schema.
    pub fn describe(&self) -> String {
        let mut s = if self.root.is_empty() { self.format.clone() } else { format!("{} {}", self.format, self.root) };
        if !self.schema.is_empty() {
            let h = murmur3::murmur3_x64_128(&mut self.schema.as_bytes(), 0).unwrap_or(0);
            s.push_str(&format!(" (schema {:08x})", h as u32));
        }
        s
    }
}

/// The serializers of one declared state, as its operator kind declares them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateSerializers {
    /// State name.
    pub state: String,
    /// Declared kind (`value`, `list`, `map`, …).
    pub kind: String,
    /// The value's (list element's, map value's, accumulator's) serializer.
    pub value: SerializerSnapshot,
    /// A map's user-key serializer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_key: Option<SerializerSnapshot>,
    /// The namespace serializer of a namespaced (window, timer) state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<SerializerSnapshot>,
}

/// How a new serializer relates to the snapshot of the one that wrote a state, from best to worst.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Resolution {
    /// It reads the stored bytes as they are.
    AsIs,
    /// It reads them as they are once configured from the snapshot (only names, docs or aliases changed).
    Reconfigured,
    /// Every stored value must be rewritten with the new serializer first.
    AfterMigration,
    /// It cannot read them: why.
    Incompatible(String),
}

impl Resolution {
    /// The weaker of two results: what a state made of several serializers gets.
    pub fn weakest(self, other: Resolution) -> Resolution {
        self.max(other)
    }

    /// The name `savepoint check` prints for it.
    pub fn name(&self) -> &'static str {
        match self {
            Resolution::AsIs => "compatible as is",
            Resolution::Reconfigured => "compatible after reconfiguration",
            Resolution::AfterMigration => "compatible after migration",
            Resolution::Incompatible(_) => "incompatible",
        }
    }
}

/// What judges a new serializer against an old one's snapshot: the formats' own rules on a task manager
/// (`weir_state::typed::evolution`), or their answers relayed to the job manager, which links no format.
pub trait SerializerJudge {
    /// How `reading` relates to `written`, the serializer the state was written with.
    fn resolve(&self, written: &SerializerSnapshot, reading: &SerializerSnapshot) -> Resolution;
    /// `snapshot`'s schema as a person reads it (Avro's JSON, a signature, a Protobuf message's fields).
    fn schema_text(&self, snapshot: &SerializerSnapshot) -> String;
}
