//! Serialization formats for state values, each a [`StateCodec`] whose [`TypeSignature`] carries a serializer
//! snapshot (`weir_common::state::serializer`), so that checkpoints record the schema a state was written with:
//!
//! - [`Bincode<T>`]: any serde type, fast and compact, not evolvable — a restore accepts it only when `T`'s
//!   type signature is unchanged (otherwise the state is reported `DROPPED`, and needs permission).
//! - [`Avro<T>`]: serde types with an Avro schema (`apache_avro::AvroSchema`, derivable); evolvable by Avro's
//!   schema-resolution rules, and migrated on restore when the schema changed (`MIGRATED`).
//! - [`Protobuf<T>`]: `prost` messages with `prost-reflect` descriptors; evolvable by field number (old bytes read
//!   as they are), and a field number reused with another type is refused before deploying (`INCOMPATIBLE`).
//!
//! Each wraps the user's type (`Avro(profile)`, `*state_value`) and is used as the state's value type:
//! `ValueState<Avro<Profile>>`, declared in the kind's signature as `.value::<Avro<Profile>>("profile")`.
//!
//! A value whose type cannot be written in its own format (an `Avro<T>` whose serde form does not match its
//! schema) is a bug in the type's definition and panics with the state type's name; reading stored bytes that do
//! not decode is an error ([`StateError::Decode`]).

use crate::error::StateError;
use crate::typed::codec::StateCodec;
use crate::typed::evolution::{avro_snapshot, protobuf_snapshot};
use crate::typed::signature::{Shape, TypeSignature};
use prost_reflect::ReflectMessage;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::any::TypeId;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::rc::Rc;
use weir_common::state::serializer::SerializerSnapshot;

macro_rules! wrapper {
    ($name:ident, $what:literal) => {
        #[doc = $what]
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct $name<T>(pub T);

        impl<T> Deref for $name<T> {
            type Target = T;
            fn deref(&self) -> &T {
                &self.0
            }
        }

        impl<T> DerefMut for $name<T> {
            fn deref_mut(&mut self) -> &mut T {
                &mut self.0
            }
        }

        impl<T> From<T> for $name<T> {
            fn from(t: T) -> Self {
                $name(t)
            }
        }
    };
}

wrapper!(Bincode, "A state value stored as bincode (serde): fast, not evolvable.");
wrapper!(Avro, "A state value stored as an Avro datum of `T`'s schema: evolvable by Avro's rules.");
wrapper!(Protobuf, "A state value stored as a Protobuf message: evolvable by field number.");

fn corrupt(what: &str, e: impl std::fmt::Display) -> StateError {
    StateError::Corrupt(format!("{what}: {e}"))
}

impl<T: Serialize + DeserializeOwned> StateCodec for Bincode<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        if let Err(e) = bincode::serialize_into(out, &self.0) {
            panic!("{} cannot be written as bincode: {e}", std::any::type_name::<T>());
        }
    }

    fn decode(bytes: &[u8]) -> Result<Self, StateError> {
        bincode::deserialize(bytes).map(Bincode).map_err(|e| corrupt("bincode", e))
    }
}

impl<T: TypeSignature> TypeSignature for Bincode<T> {
    fn shape() -> Shape {
        T::shape()
    }

    fn serializer() -> Option<SerializerSnapshot> {
        let shape = T::shape();
        let root = match &shape {
            Shape::Struct { name, .. } | Shape::Enum { name, .. } | Shape::Custom { name, .. } => name.clone(),
            other => other.canonical(),
        };
        Some(SerializerSnapshot::bincode(&root, &shape.canonical()))
    }
}

thread_local! {
    /// Each Avro type's parsed schema: `AvroSchema::get_schema` builds it anew on every call.
    static AVRO_SCHEMAS: RefCell<HashMap<TypeId, Rc<apache_avro::Schema>>> = RefCell::new(HashMap::new());
}

fn avro_schema<T: apache_avro::AvroSchema + 'static>() -> Rc<apache_avro::Schema> {
    AVRO_SCHEMAS.with(|m| m.borrow_mut().entry(TypeId::of::<T>()).or_insert_with(|| Rc::new(T::get_schema())).clone())
}

impl<T: Serialize + DeserializeOwned + apache_avro::AvroSchema + 'static> StateCodec for Avro<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        let schema = avro_schema::<T>();
        let written = apache_avro::to_value(&self.0)
            .and_then(|v| v.resolve(&schema))
            .and_then(|v| apache_avro::to_avro_datum(&schema, v));
        match written {
            Ok(bytes) => out.extend_from_slice(&bytes),
            Err(e) => panic!("{} does not match its own Avro schema: {e}", std::any::type_name::<T>()),
        }
    }

    fn decode(bytes: &[u8]) -> Result<Self, StateError> {
        let schema = avro_schema::<T>();
        let mut r = bytes;
        let value = apache_avro::from_avro_datum(&schema, &mut r, None).map_err(|e| corrupt("avro", e))?;
        apache_avro::from_value::<T>(&value).map(Avro).map_err(|e| corrupt("avro", e))
    }
}

impl<T: apache_avro::AvroSchema + 'static> TypeSignature for Avro<T> {
    fn shape() -> Shape {
        // The schema evolves by Avro's rules, so its structure is not part of the signature: adding a field
        // with a default must not change an operator's `uid_stated`.
        let name = avro_schema::<T>().name().map(|n| n.name.clone()).unwrap_or_default();
        Shape::custom(&format!("avro {name}"), 1)
    }

    fn serializer() -> Option<SerializerSnapshot> {
        Some(avro_snapshot(&avro_schema::<T>()))
    }
}

impl<T: prost::Message + Default> StateCodec for Protobuf<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(self.0.encoded_len());
        // A Vec grows, so encoding into it cannot run out of room.
        let _ = self.0.encode(out);
    }

    fn decode(bytes: &[u8]) -> Result<Self, StateError> {
        T::decode(bytes).map(Protobuf).map_err(|e| corrupt("protobuf", e))
    }
}

impl<T: ReflectMessage + Default> TypeSignature for Protobuf<T> {
    fn shape() -> Shape {
        // Evolvable by field number: the message's structure is not part of the signature.
        Shape::custom("protobuf", 1)
    }

    fn serializer() -> Option<SerializerSnapshot> {
        Some(protobuf_snapshot(&T::default().descriptor()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::typed::evolution::resolve;
    use crate::typed::signature::{serializer_of, StateSignature};
    use serde::Deserialize;
    use weir_common::state::serializer::Resolution;

    #[derive(Serialize, Deserialize, Debug, PartialEq, Clone, apache_avro::AvroSchema)]
    struct Profile {
        count: i64,
        last: String,
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq, Clone, crate::typed::signature::TypeSignature)]
    struct Person {
        age: u32,
        name: String,
    }

    #[test]
    fn formats_round_trip() {
        let mut b = Vec::new();
        Avro(Profile { count: 3, last: "x".into() }).encode(&mut b);
        assert_eq!(Avro::<Profile>::decode(&b).unwrap().0, Profile { count: 3, last: "x".into() });
        assert!(Avro::<Profile>::decode(&[0xff, 0xff]).is_err());
        let mut b = Vec::new();
        Bincode(Person { age: 4, name: "y".into() }).encode(&mut b);
        assert_eq!(Bincode::<Person>::decode(&b).unwrap().age, 4);
        assert!(Bincode::<Person>::decode(&b[..2]).is_err());
    }

    #[test]
    fn signatures_carry_serializer_snapshots() {
        let sig = StateSignature::keyed::<u64>().value::<Avro<Profile>>("p").map::<String, Bincode<Person>>("m");
        let states: Vec<_> = sig.serializers().collect();
        assert_eq!(states[0].state, "m");
        assert_eq!(states[0].value.format, "bincode");
        assert_eq!(states[0].user_key.as_ref().map(|s| s.schema.as_str()), Some("string"));
        assert_eq!(states[1].value.format, "avro");
        assert_eq!(states[1].value.root, "Profile");
        assert_eq!(sig.key_serializer().map(|s| s.schema.as_str()), Some("u64"));
        assert_eq!(resolve(&serializer_of::<Bincode<Person>>(), &serializer_of::<Bincode<Person>>()), Resolution::AsIs);
        // A namespaced state records its namespace type, which is part of its signature.
        let windows = StateSignature::keyed::<u64>().list::<u64>("w").in_namespace::<(u64, u64)>("w");
        let ns = windows.serializers().next().and_then(|s| s.namespace.clone()).expect("a namespace serializer");
        assert_eq!(ns.schema, "(u64, u64)");
        assert_ne!(windows.fingerprint(), StateSignature::keyed::<u64>().list::<u64>("w").fingerprint());
    }
}
