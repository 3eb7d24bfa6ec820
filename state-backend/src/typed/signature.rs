//! State type signatures: a stable structural fingerprint of a Rust type ([`TypeSignature`], derived with
//! `#[derive(TypeSignature)]`) and of an operator's states ([`StateSignature`]: the key type and, per state,
//! its kind and types), after DataDome's `flink-utils`.
//!
//! A signature is computed from the type's *structure* — primitives, `String`, sequences, options, maps, sets,
//! tuples, arrays, and structs and enums by identifier with their fields (names, order, types) and variants —
//! rendered as canonical text and hashed with MurmurHash3 (x64, 128 bits). It does not depend on the compiler
//! version, on `std::any::type_name`'s text or on module paths, so it changes exactly when the structure does:
//! a field added to a struct nested two levels down changes the signature of every state holding it, and
//! `ValueState<Vec<u32>>` differs from `ListState<u32>`.
//!
//! [`uid_stated`] folds an operator's state signature into its uid, so that a structural change gives the
//! operator a new uid — its old state is then dropped on purpose, and reported, instead of failing the restore.
//! [`assert_signature`] pins the signature of an important operator in a test: the test fails when the
//! structure changes, printing the old and new structure side by side.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use weir_common::state::serializer::{SerializerSnapshot, StateSerializers};

pub use weir_state_derive::TypeSignature;

/// The structure of a type, as [`TypeSignature::shape`] describes it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// A primitive or other leaf type, by a stable name (`u32`, `string`, `bool`, `bytes`, …).
    Leaf(String),
    /// `Option<T>`.
    Option(Box<Shape>),
    /// An ordered sequence: `Vec<T>`, `VecDeque<T>`, boxed slices.
    Seq(Box<Shape>),
    /// A set: `HashSet<T>`, `BTreeSet<T>` (both store the same elements).
    Set(Box<Shape>),
    /// A map: `HashMap<K, V>`, `BTreeMap<K, V>`.
    Map(Box<Shape>, Box<Shape>),
    /// `[T; N]`.
    Array(usize, Box<Shape>),
    /// A tuple (the unit type is the empty tuple).
    Tuple(Vec<Shape>),
    /// A struct by identifier, with its fields in declaration order (tuple fields are named `0`, `1`, …).
    Struct {
        /// The type's identifier (no module path).
        name: String,
        /// Field names and shapes.
        fields: Vec<(String, Shape)>,
    },
    /// An enum by identifier, with its variants in declaration order and their fields.
    Enum {
        /// The type's identifier (no module path).
        name: String,
        /// Variant names and their fields (empty for a unit variant).
        variants: Vec<(String, Vec<(String, Shape)>)>,
    },
    /// A type whose signature is written by hand ([`Shape::custom`]): its name and a version its author bumps
    /// when the serialized form changes.
    Custom {
        /// A stable name.
        name: String,
        /// The serialized form's version.
        version: u32,
    },
    /// A reference to an enclosing struct or enum of this name (a recursive type).
    Recursive(String),
}

impl Shape {
    /// A leaf named `name`.
    pub fn leaf(name: &str) -> Shape {
        Shape::Leaf(name.to_string())
    }

    /// The shape of a type with a hand-written signature: `name` and the `version` of its serialized form.
    pub fn custom(name: &str, version: u32) -> Shape {
        Shape::Custom { name: name.to_string(), version }
    }

    /// The canonical one-line text of this shape (what the fingerprint hashes).
    pub fn canonical(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, None);
        out
    }

    /// The shape as indented text, one field per line (what a changed signature prints side by side).
    pub fn pretty(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, Some(0));
        out
    }

    /// Writes the shape; `indent` is `Some(depth)` for the multi-line form.
    fn write(&self, out: &mut String, indent: Option<usize>) {
        let fields = |out: &mut String, fields: &[(String, Shape)], indent: Option<usize>| {
            out.push('{');
            for (i, (name, shape)) in fields.iter().enumerate() {
                match indent {
                    Some(d) => {
                        out.push('\n');
                        out.push_str(&"  ".repeat(d + 1));
                    }
                    None if i > 0 => out.push_str(", "),
                    None => {}
                }
                out.push_str(name);
                out.push_str(": ");
                shape.write(out, indent.map(|d| d + 1));
                if indent.is_some() {
                    out.push(',');
                }
            }
            if let Some(d) = indent.filter(|_| !fields.is_empty()) {
                out.push('\n');
                out.push_str(&"  ".repeat(d));
            }
            out.push('}');
        };
        match self {
            Shape::Leaf(name) => out.push_str(name),
            Shape::Option(t) => Self::generic(out, "option", &[t], indent),
            Shape::Seq(t) => Self::generic(out, "seq", &[t], indent),
            Shape::Set(t) => Self::generic(out, "set", &[t], indent),
            Shape::Map(k, v) => Self::generic(out, "map", &[k, v], indent),
            Shape::Array(n, t) => {
                let _ = write!(out, "[{n}; ");
                t.write(out, indent);
                out.push(']');
            }
            Shape::Tuple(items) => {
                out.push('(');
                for (i, t) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    t.write(out, indent);
                }
                out.push(')');
            }
            Shape::Struct { name, fields: f } => {
                let _ = write!(out, "struct {name} ");
                fields(out, f, indent);
            }
            Shape::Enum { name, variants } => {
                let _ = write!(out, "enum {name} ");
                out.push('{');
                for (i, (variant, f)) in variants.iter().enumerate() {
                    match indent {
                        Some(d) => {
                            out.push('\n');
                            out.push_str(&"  ".repeat(d + 1));
                        }
                        None if i > 0 => out.push_str(", "),
                        None => {}
                    }
                    out.push_str(variant);
                    if !f.is_empty() {
                        out.push(' ');
                        fields(out, f, indent.map(|d| d + 1));
                    }
                    if indent.is_some() {
                        out.push(',');
                    }
                }
                if let Some(d) = indent.filter(|_| !variants.is_empty()) {
                    out.push('\n');
                    out.push_str(&"  ".repeat(d));
                }
                out.push('}');
            }
            Shape::Custom { name, version } => {
                let _ = write!(out, "custom {name} v{version}");
            }
            Shape::Recursive(name) => {
                let _ = write!(out, "recursive {name}");
            }
        }
    }

    fn generic(out: &mut String, name: &str, args: &[&Shape], indent: Option<usize>) {
        out.push_str(name);
        out.push('<');
        for (i, a) in args.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            a.write(out, indent);
        }
        out.push('>');
    }
}

/// A stable fingerprint of a canonical text: the first 64 bits of its MurmurHash3 (x64, 128 bits).
fn fingerprint(text: &str) -> u64 {
    // Hashing an in-memory slice cannot fail.
    let h = murmur3::murmur3_x64_128(&mut text.as_bytes(), 0).unwrap_or_default();
    (h >> 64) as u64
}

/// A type whose structure has a stable signature. Derive it (`#[derive(TypeSignature)]`) for structs and
/// enums; implement [`TypeSignature::shape`] by hand (with [`Shape::custom`]) for a type that serializes in a
/// way of its own.
pub trait TypeSignature {
    /// This type's structure.
    fn shape() -> Shape;

    /// The fingerprint of [`TypeSignature::shape`].
    fn signature() -> u64 {
        fingerprint(&Self::shape().canonical())
    }

    /// The snapshot of this type's serializer, for a type that is itself a state serializer
    /// ([`crate::typed::formats`]: `Bincode<T>`, `Avro<T>`, `Protobuf<T>`); other types are known by their signature.
    fn serializer() -> Option<SerializerSnapshot> {
        None
    }
}

/// The serializer snapshot recorded for a state type `T`: its own, or its signature's canonical text.
pub fn serializer_of<T: TypeSignature + ?Sized>() -> SerializerSnapshot {
    T::serializer().unwrap_or_else(|| SerializerSnapshot::signature(&T::shape().canonical()))
}

thread_local! {
    /// The structs and enums whose shape is being built, innermost last (recursion guard).
    static BUILDING: RefCell<Vec<&'static str>> = const { RefCell::new(Vec::new()) };
}

/// Builds the shape of struct or enum `T` (named `name`) with `f`, or returns [`Shape::Recursive`] if `T` is
/// already being built further up (a recursive type). Called by the derived code.
#[doc(hidden)]
pub fn enter<T: ?Sized>(name: &str, f: impl FnOnce() -> Shape) -> Shape {
    // The recursion key only has to tell types apart within one process, so `type_name` is fine here; it
    // never reaches the signature.
    let key = std::any::type_name::<T>();
    if BUILDING.with(|b| b.borrow().contains(&key)) {
        return Shape::Recursive(name.to_string());
    }
    BUILDING.with(|b| b.borrow_mut().push(key));
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            BUILDING.with(|b| {
                b.borrow_mut().pop();
            });
        }
    }
    let _pop = Pop;
    f()
}

macro_rules! leaves {
    ($($t:ty => $name:expr),* $(,)?) => {
        $(impl TypeSignature for $t {
            fn shape() -> Shape {
                Shape::leaf($name)
            }
        })*
    };
}

leaves! {
    bool => "bool", char => "char",
    u8 => "u8", u16 => "u16", u32 => "u32", u64 => "u64", u128 => "u128", usize => "u64",
    i8 => "i8", i16 => "i16", i32 => "i32", i64 => "i64", i128 => "i128", isize => "i64",
    f32 => "f32", f64 => "f64",
    String => "string", str => "string",
}

impl TypeSignature for () {
    fn shape() -> Shape {
        Shape::Tuple(Vec::new())
    }
}

impl<T: TypeSignature + ?Sized> TypeSignature for &T {
    fn shape() -> Shape {
        T::shape()
    }
}

impl<T: TypeSignature + ?Sized> TypeSignature for Box<T> {
    fn shape() -> Shape {
        T::shape()
    }
}

impl<T: TypeSignature + ?Sized> TypeSignature for std::sync::Arc<T> {
    fn shape() -> Shape {
        T::shape()
    }
}

impl<T: TypeSignature> TypeSignature for Option<T> {
    fn shape() -> Shape {
        Shape::Option(Box::new(T::shape()))
    }
}

impl<T: TypeSignature> TypeSignature for Vec<T> {
    fn shape() -> Shape {
        Shape::Seq(Box::new(T::shape()))
    }
}

impl<T: TypeSignature> TypeSignature for VecDeque<T> {
    fn shape() -> Shape {
        Shape::Seq(Box::new(T::shape()))
    }
}

impl<T: TypeSignature> TypeSignature for [T] {
    fn shape() -> Shape {
        Shape::Seq(Box::new(T::shape()))
    }
}

impl<T: TypeSignature, const N: usize> TypeSignature for [T; N] {
    fn shape() -> Shape {
        Shape::Array(N, Box::new(T::shape()))
    }
}

impl<T: TypeSignature, S> TypeSignature for HashSet<T, S> {
    fn shape() -> Shape {
        Shape::Set(Box::new(T::shape()))
    }
}

impl<T: TypeSignature> TypeSignature for BTreeSet<T> {
    fn shape() -> Shape {
        Shape::Set(Box::new(T::shape()))
    }
}

impl<K: TypeSignature, V: TypeSignature, S> TypeSignature for HashMap<K, V, S> {
    fn shape() -> Shape {
        Shape::Map(Box::new(K::shape()), Box::new(V::shape()))
    }
}

impl<K: TypeSignature, V: TypeSignature> TypeSignature for BTreeMap<K, V> {
    fn shape() -> Shape {
        Shape::Map(Box::new(K::shape()), Box::new(V::shape()))
    }
}

macro_rules! tuples {
    ($(($($t:ident),+)),* $(,)?) => {
        $(impl<$($t: TypeSignature),+> TypeSignature for ($($t,)+) {
            fn shape() -> Shape {
                Shape::Tuple(vec![$($t::shape()),+])
            }
        })*
    };
}

tuples! {
    (A), (A, B), (A, B, C), (A, B, C, D), (A, B, C, D, E), (A, B, C, D, E, F), (A, B, C, D, E, F, G),
    (A, B, C, D, E, F, G, H),
}

/// The kind of one declared state in a [`StateSignature`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeclaredKind {
    /// `ValueState<T>`.
    Value,
    /// `ListState<T>`.
    List,
    /// `MapState<K, V>`.
    Map,
    /// `ReducingState<T>`.
    Reducing,
    /// `AggregatingState<IN, ACC>` (the accumulator is what is stored).
    Aggregating,
    /// Operator list state (`ListState` of operator state).
    OperatorList,
    /// Operator union list state.
    Union,
    /// Broadcast state `K -> V`.
    Broadcast,
    /// A timer service's timers of one domain (namespaced by the timers' namespace type).
    Timers,
}

impl DeclaredKind {
    fn name(self) -> &'static str {
        match self {
            DeclaredKind::Value => "value",
            DeclaredKind::List => "list",
            DeclaredKind::Map => "map",
            DeclaredKind::Reducing => "reducing",
            DeclaredKind::Aggregating => "aggregating",
            DeclaredKind::OperatorList => "operator-list",
            DeclaredKind::Union => "union",
            DeclaredKind::Broadcast => "broadcast",
            DeclaredKind::Timers => "timers",
        }
    }
}

/// An operator's state signature: its key type (keyed operators) and, for each declared state, its name,
/// kind and types. Built with [`StateSignature::keyed`] or [`StateSignature::unkeyed`] and the per-kind
/// methods, in any order (states are listed by name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateSignature {
    key: Option<(Shape, SerializerSnapshot)>,
    /// Per state name: its kind, its types' shapes and its serializers.
    states: BTreeMap<String, (DeclaredKind, Vec<Shape>, StateSerializers)>,
}

impl StateSignature {
    /// The signature of a keyed operator whose key type is `K`.
    pub fn keyed<K: TypeSignature>() -> Self {
        StateSignature { key: Some((K::shape(), serializer_of::<K>())), states: BTreeMap::new() }
    }

    /// The signature of an operator without keyed state.
    pub fn unkeyed() -> Self {
        StateSignature { key: None, states: BTreeMap::new() }
    }

    /// Declares state `name`: its kind, its types' shapes, its value's serializer and a map's user-key one.
    fn with<V: TypeSignature>(
        mut self,
        name: &str,
        kind: DeclaredKind,
        user_key: Option<(Shape, SerializerSnapshot)>,
    ) -> Self {
        let mut types: Vec<Shape> = user_key.iter().map(|(s, _)| s.clone()).collect();
        types.push(V::shape());
        let serializers = StateSerializers {
            state: name.to_string(),
            kind: kind.name().to_string(),
            value: serializer_of::<V>(),
            user_key: user_key.map(|(_, s)| s),
            namespace: None,
        };
        self.states.insert(name.to_string(), (kind, types, serializers));
        self
    }

    /// Declares `ValueState<T>` `name`.
    pub fn value<T: TypeSignature>(self, name: &str) -> Self {
        self.with::<T>(name, DeclaredKind::Value, None)
    }

    /// Declares `ListState<T>` `name`.
    pub fn list<T: TypeSignature>(self, name: &str) -> Self {
        self.with::<T>(name, DeclaredKind::List, None)
    }

    /// Declares `MapState<K, V>` `name`.
    pub fn map<K: TypeSignature, V: TypeSignature>(self, name: &str) -> Self {
        self.with::<V>(name, DeclaredKind::Map, Some((K::shape(), serializer_of::<K>())))
    }

    /// Declares `ReducingState<T>` `name`.
    pub fn reducing<T: TypeSignature>(self, name: &str) -> Self {
        self.with::<T>(name, DeclaredKind::Reducing, None)
    }

    /// Declares `AggregatingState` `name` with accumulator `ACC`.
    pub fn aggregating<ACC: TypeSignature>(self, name: &str) -> Self {
        self.with::<ACC>(name, DeclaredKind::Aggregating, None)
    }

    /// Declares operator list state `name` of elements `T`.
    pub fn operator_list<T: TypeSignature>(self, name: &str) -> Self {
        self.with::<T>(name, DeclaredKind::OperatorList, None)
    }

    /// Declares union list state `name` of elements `T`.
    pub fn union<T: TypeSignature>(self, name: &str) -> Self {
        self.with::<T>(name, DeclaredKind::Union, None)
    }

    /// Declares broadcast state `name` mapping `K` to `V`.
    pub fn broadcast<K: TypeSignature, V: TypeSignature>(self, name: &str) -> Self {
        self.with::<V>(name, DeclaredKind::Broadcast, Some((K::shape(), serializer_of::<K>())))
    }

    /// Declares the operator's timer service, whose timers carry namespaces of type `N` (`()` for none): both
    /// domains' timer states, with the namespace type, so a restore into another namespace type is refused.
    pub fn timers<N: TypeSignature>(self) -> Self {
        let mut s = self;
        for name in [crate::timers::EVENT_TIMERS, crate::timers::PROCESSING_TIMERS] {
            s = s.with::<()>(name, DeclaredKind::Timers, None).in_namespace::<N>(name);
        }
        s
    }

    /// Declares that state `name` (declared before) is scoped to namespaces of type `N` (window and timer state,
    /// `set_namespace`): the namespace type is part of the signature, and its serializer is recorded (namespaces
    /// are part of the row key, so a restore into another namespace type is refused).
    pub fn in_namespace<N: TypeSignature>(mut self, name: &str) -> Self {
        if let Some((_, types, serializers)) = self.states.get_mut(name) {
            types.push(Shape::custom(&format!("namespace {}", N::shape().canonical()), 1));
            serializers.namespace = Some(serializer_of::<N>());
        }
        self
    }

    /// The key's serializer snapshot (keyed operators).
    pub fn key_serializer(&self) -> Option<&SerializerSnapshot> {
        self.key.as_ref().map(|(_, s)| s)
    }

    /// Each declared state's serializers, by state name.
    pub fn serializers(&self) -> impl Iterator<Item = &StateSerializers> {
        self.states.values().map(|(_, _, s)| s)
    }

    /// The canonical one-line text (what [`StateSignature::fingerprint`] hashes).
    pub fn canonical(&self) -> String {
        self.render(false)
    }

    /// One line per state, types indented: what [`assert_signature`] prints.
    pub fn pretty(&self) -> String {
        self.render(true)
    }

    fn render(&self, pretty: bool) -> String {
        let shape = |s: &Shape| if pretty { s.pretty() } else { s.canonical() };
        let mut out = String::new();
        match self.key.as_ref().map(|(k, _)| k) {
            Some(k) => {
                let _ = write!(out, "key: {}", shape(k));
            }
            None => out.push_str("unkeyed"),
        }
        for (name, (kind, types, _)) in &self.states {
            out.push_str(if pretty { "\n" } else { "; " });
            let types: Vec<String> = types.iter().map(shape).collect();
            let _ = write!(out, "{} {name:?}: {}", kind.name(), types.join(", "));
        }
        out
    }

    /// The stable fingerprint of this signature.
    pub fn fingerprint(&self) -> u64 {
        fingerprint(&self.canonical())
    }

    /// The fingerprint as 16 hex digits.
    pub fn hex(&self) -> String {
        format!("{:016x}", self.fingerprint())
    }
}

/// `uid` with the operator's state signature folded in (`<uid>@<first 8 hex digits>`): a structural change of
/// its state gives the operator a new uid, so its old state is dropped on purpose — and reported — instead of
/// failing the restore (DataDome's `uidStated`). What a spec's `uid_stated: true` does to an operator's uid.
pub fn uid_stated(uid: &str, signature: &StateSignature) -> String {
    weir_common::job::spec::stated_uid(uid, &signature.hex())
}

/// Fails (panics, for tests) unless `signature` renders as `pinned` (its [`StateSignature::pretty`] text),
/// printing both side by side: pin the signature of an operator whose state must not be lost by accident, so
/// that changing its structure is a reviewed decision (update the pinned text along with the change).
pub fn assert_signature(what: &str, signature: &StateSignature, pinned: &str) {
    let now = signature.pretty();
    if now.trim() == pinned.trim() {
        return;
    }
    let old: Vec<&str> = pinned.trim().lines().collect();
    let new: Vec<&str> = now.lines().collect();
    let width = old.iter().map(|l| l.chars().count()).max().unwrap_or(0).max(8);
    let mut table = format!("{:<width$} | now\n", "pinned");
    for i in 0..old.len().max(new.len()) {
        let (a, b) = (old.get(i).copied().unwrap_or(""), new.get(i).copied().unwrap_or(""));
        let mark = if a == b { ' ' } else { '*' };
        let _ = writeln!(table, "{a:<width$} |{mark}{b}");
    }
    panic!(
        "the state signature of {what} changed: its state will not restore into the new version (with uid_stated \
         it is dropped). If that is intended, pin the new text.\n{table}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(dead_code)]
    #[derive(TypeSignature)]
    struct Address {
        street: String,
        zip: u32,
    }

    #[allow(dead_code)]
    #[derive(TypeSignature)]
    struct Person {
        name: String,
        address: Address,
    }

    /// The same as [`Person`], one field more in the struct two levels down.
    mod changed {
        use super::TypeSignature;

        #[allow(dead_code)]
        #[derive(TypeSignature)]
        pub struct Address {
            street: String,
            zip: u32,
            country: String,
        }

        #[allow(dead_code)]
        #[derive(TypeSignature)]
        pub struct Person {
            name: String,
            address: Address,
        }
    }

    #[allow(dead_code)]
    #[derive(TypeSignature)]
    struct Population {
        name: String,
        address: Address,
    }

    #[allow(dead_code)]
    #[derive(TypeSignature)]
    struct Wrapper<T> {
        inner: T,
        count: u64,
    }

    #[allow(dead_code)]
    #[derive(TypeSignature)]
    enum Event {
        Started,
        Moved(i32, i32),
        Renamed { from: String, to: String },
    }

    #[allow(dead_code)]
    #[derive(TypeSignature)]
    struct Tree {
        label: String,
        children: Vec<Tree>,
    }

    #[allow(dead_code)]
    #[derive(TypeSignature)]
    struct WithCache {
        value: u64,
        #[signature(skip)]
        cache: Vec<u8>,
    }

    /// A type serialized by hand.
    struct Hll;

    impl TypeSignature for Hll {
        fn shape() -> Shape {
            Shape::custom("hyperloglog", 2)
        }
    }

    #[test]
    fn a_field_added_two_levels_down_changes_the_signature() {
        assert_ne!(Vec::<Person>::signature(), Vec::<changed::Person>::signature());
        assert_ne!(
            StateSignature::keyed::<u64>().value::<Vec<Person>>("people").fingerprint(),
            StateSignature::keyed::<u64>().value::<Vec<changed::Person>>("people").fingerprint()
        );
    }

    #[test]
    fn types_of_the_same_fields_under_other_names_differ() {
        assert_ne!(Vec::<Person>::signature(), Vec::<Population>::signature());
    }

    #[test]
    fn a_value_of_a_vec_is_not_a_list() {
        let value = StateSignature::keyed::<u64>().value::<Vec<u32>>("s");
        let list = StateSignature::keyed::<u64>().list::<u32>("s");
        assert_ne!(value.fingerprint(), list.fingerprint());
        // The key type counts too.
        assert_ne!(value.fingerprint(), StateSignature::keyed::<String>().value::<Vec<u32>>("s").fingerprint());
    }

    #[test]
    fn hand_written_signatures_change_with_their_version() {
        struct HllV3;
        impl TypeSignature for HllV3 {
            fn shape() -> Shape {
                Shape::custom("hyperloglog", 3)
            }
        }
        assert_eq!(Hll::shape().canonical(), "custom hyperloglog v2");
        assert_ne!(Hll::signature(), HllV3::signature());
    }

    #[test]
    fn generics_recursion_enums_and_skipped_fields() {
        assert_ne!(Wrapper::<u32>::signature(), Wrapper::<String>::signature());
        assert_eq!(Wrapper::<u32>::shape().canonical(), "struct Wrapper {inner: u32, count: u64}");
        assert_eq!(
            Event::shape().canonical(),
            "enum Event {Started, Moved {0: i32, 1: i32}, Renamed {from: string, to: string}}"
        );
        assert_eq!(Tree::shape().canonical(), "struct Tree {label: string, children: seq<recursive Tree>}");
        assert_eq!(WithCache::shape().canonical(), "struct WithCache {value: u64}");
        // Collections of the same elements store the same thing.
        assert_eq!(HashMap::<String, u32>::signature(), BTreeMap::<String, u32>::signature());
        assert_ne!(<[u8; 4]>::signature(), Vec::<u8>::signature());
        assert_ne!(<(u32, String)>::signature(), <(String, u32)>::signature());
    }

    #[test]
    fn signatures_are_stable_across_builds() {
        // Pinned values: a change here means every stored signature changes (never do that by accident).
        assert_eq!(u32::shape().canonical(), "u32");
        let sig = StateSignature::keyed::<u64>().value::<Vec<Person>>("people").map::<String, Option<u64>>("seen");
        assert_eq!(
            sig.canonical(),
            "key: u64; value \"people\": seq<struct Person {name: string, address: struct Address {street: string, \
             zip: u32}}>; map \"seen\": string, option<u64>"
        );
        assert_eq!(sig.hex(), format!("{:016x}", fingerprint(&sig.canonical())));
        assert_eq!(uid_stated("people", &sig), format!("people@{}", &sig.hex()[..8]));
    }

    #[test]
    fn a_pinned_signature_prints_both_structures_when_it_changes() {
        let sig = StateSignature::keyed::<u64>().value::<Person>("person");
        assert_signature("the person operator", &sig, &sig.pretty());
        let changed = StateSignature::keyed::<u64>().value::<changed::Person>("person");
        let err = std::panic::catch_unwind(|| assert_signature("the person operator", &changed, &sig.pretty()))
            .expect_err("a changed structure fails");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("the state signature of the person operator changed"), "{msg}");
        assert!(msg.lines().any(|l| l.contains("|*") && l.ends_with("country: string,")), "{msg}");
    }

    #[test]
    fn timer_services_are_declared_as_one_timers_state_per_domain_with_their_namespace_type() {
        let sig = |s: StateSignature| s.serializers().cloned().collect::<Vec<_>>();
        let a = sig(StateSignature::keyed::<u64>().timers::<u8>());
        let names: Vec<(&str, &str)> = a.iter().map(|s| (s.state.as_str(), s.kind.as_str())).collect();
        assert_eq!(names, [("_timers.event", "timers"), ("_timers.processing", "timers")]);
        assert!(a.iter().all(|s| s.namespace.is_some()));
        let b = sig(StateSignature::keyed::<u64>().timers::<u64>());
        assert_ne!(a[0].namespace, b[0].namespace, "the namespace type is recorded");
        assert_ne!(
            StateSignature::keyed::<u64>().timers::<u8>().fingerprint(),
            StateSignature::keyed::<u64>().timers::<u64>().fingerprint()
        );
    }
}
