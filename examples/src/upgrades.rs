//! Four keyed kinds in two versions, as a user upgrading a job ships them: `weir-example-taskmanager` registers
//! the first ([`v1`]), `weir-example-taskmanager-v2` the second ([`v2`]). Each counts records per key in one
//! value state `tally` and emits the count per key at end of input (as `keyed-count` does); what changes
//! between the versions is the state's type:
//!
//! | kind | state (v1) | state (v2) | restore of a v1 savepoint into v2 |
//! |---|---|---|---|
//! | `profiles` | `Avro<Profile>` `{count: long, label: string}` | `Avro<Profile>` `{count: long, weight: long = 1}` | `MIGRATED`: `label` removed, `weight` added with its default; v2 adds `weight` per record |
//! | `sessions` | `Protobuf<Session>` `{1: uint64 count, 2: string label}` | `{1: uint64 count, 2: double ratio}` | `INCOMPATIBLE`: field number 2 reused with another type |
//! | `people` | `Bincode<Person>` `{visits, name}` | `{visits, name, email}` | `DROPPED`: bincode is not evolvable; needs permission |
//! | `visits` | `u64`, keyed by bytes | `u64`, keyed by `u64` | `INCOMPATIBLE`: keys are never migrated |

use arrow_array::RecordBatch;
use serde::{Deserialize, Serialize};
use std::sync::LazyLock;
use weir_common::job::kind::{KindInfo, Role, StateClass};
use weir_state::signature::{StateSignature, TypeSignature};
use weir_state::{Avro, Bincode, Protobuf, StateCodec, ValueState};
use weir_taskmanager::api::operator::{Collector, InitContext, Operator, OperatorError, ProcessContext};
use weir_taskmanager::api::record::{Record, Value};
use weir_taskmanager::api::registry::{Instance, Registry};

/// The state every kind here keeps.
pub const STATE: &str = "tally";

/// The descriptors of the example Protobuf messages (compiled by `build.rs`).
static POOL: LazyLock<prost_reflect::DescriptorPool> = LazyLock::new(|| {
    prost_reflect::DescriptorPool::decode(include_bytes!(concat!(env!("OUT_DIR"), "/sessions.bin")).as_slice())
        .expect("the descriptors compiled into this binary decode")
});

fn message(name: &str) -> prost_reflect::MessageDescriptor {
    POOL.get_message_by_name(name).expect("the message is compiled into this binary")
}

/// A per-key state value: what one record adds to it, and the count it reports.
pub trait Tally: StateCodec + TypeSignature + Default + Send + 'static {
    /// Counts one record.
    fn add(&mut self);
    /// The count emitted at end of input.
    fn count(&self) -> i64;
}

/// The operator: `tally` per key, emitted at end of input.
pub struct PerKey<T: Tally> {
    kind: &'static str,
    state: Option<ValueState<T>>,
}

impl<T: Tally> Operator for PerKey<T> {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        let backend =
            ctx.keyed.as_mut().ok_or_else(|| OperatorError::Misuse(format!("{} needs keyed state", self.kind)))?;
        self.state = Some(ValueState::register(&mut **backend, STATE)?);
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: &RecordBatch,
        ctx: &mut ProcessContext<'_>,
        _: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let records = weir_taskmanager::api::batch::records(batch)?;
        let backend = ctx.keyed()?;
        let state = self.state.as_mut().ok_or_else(|| OperatorError::Misuse("used before initialize_state".into()))?;
        for r in records {
            backend.set_current_key(&r.key);
            let mut t = state.value(backend)?.unwrap_or_default();
            t.add();
            state.update(backend, &t)?;
        }
        Ok(())
    }

    fn end_of_input(&mut self, ctx: &mut ProcessContext<'_>, out: &mut Collector<'_>) -> Result<(), OperatorError> {
        let backend = ctx.keyed()?;
        let state = self.state.as_ref().ok_or_else(|| OperatorError::Misuse("used before initialize_state".into()))?;
        let mut counts = Vec::new();
        state.for_each(backend, |k, t| {
            counts.push((k.to_vec(), t.count()));
            Ok(())
        })?;
        for (key, n) in counts {
            out.emit(Record { key: key.as_slice().into(), value: Value::I64(n), timestamp: None })?;
        }
        Ok(())
    }
}

/// Registers kind `kind` keeping `T` per key of type `K`.
fn register<T: Tally, K: TypeSignature>(r: &mut Registry, kind: &'static str) {
    let info = KindInfo::new(kind, Role::Operator, true, env!("CARGO_PKG_VERSION"))
        .with_states(&[(STATE, StateClass::Value, std::any::type_name::<T>())])
        .with_output(weir_common::job::schema::OutputSchema::Columns(weir_common::job::schema::key_value("int64")));
    let signature = StateSignature::keyed::<K>().value::<T>(STATE);
    r.register(weir_taskmanager::api::registry::signed(info, &signature), move |config| match config.keys().next() {
        Some(unknown) => Err(format!("config field {unknown:?}: unknown field ({kind} takes none)").into()),
        None => Ok(Instance::Operator(Box::new(PerKey::<T> { kind, state: None }))),
    });
}

/// The first version of the kinds.
pub mod v1 {
    use super::*;

    /// `profiles`' state.
    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, apache_avro::AvroSchema)]
    pub struct Profile {
        /// Records seen.
        pub count: i64,
        /// A label (removed in v2).
        pub label: String,
    }

    /// `sessions`' state.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Session {
        /// Records seen.
        #[prost(uint64, tag = "1")]
        pub count: u64,
        /// A label (its number reused with another type in v2).
        #[prost(string, tag = "2")]
        pub label: String,
    }

    impl prost_reflect::ReflectMessage for Session {
        fn descriptor(&self) -> prost_reflect::MessageDescriptor {
            message("weir.examples.v1.Session")
        }
    }

    /// `people`' state.
    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, weir_state::signature::TypeSignature)]
    pub struct Person {
        /// Records seen.
        pub visits: u64,
        /// A name.
        pub name: String,
    }

    impl Tally for Avro<Profile> {
        fn add(&mut self) {
            self.count += 1;
            self.label = "seen".into();
        }
        fn count(&self) -> i64 {
            self.count
        }
    }

    impl Tally for Protobuf<Session> {
        fn add(&mut self) {
            self.count += 1;
            self.label = "seen".into();
        }
        fn count(&self) -> i64 {
            self.count as i64
        }
    }

    impl Tally for Bincode<Person> {
        fn add(&mut self) {
            self.visits += 1;
        }
        fn count(&self) -> i64 {
            self.visits as i64
        }
    }

    /// A plain counter (`visits`).
    #[derive(Clone, Copy, Debug, Default, PartialEq)]
    pub struct Visits(pub u64);

    impl StateCodec for Visits {
        fn encode(&self, out: &mut Vec<u8>) {
            self.0.encode(out)
        }
        fn decode(bytes: &[u8]) -> Result<Self, weir_state::StateError> {
            u64::decode(bytes).map(Visits)
        }
    }

    impl TypeSignature for Visits {
        fn shape() -> weir_state::signature::Shape {
            u64::shape()
        }
    }

    impl Tally for Visits {
        fn add(&mut self) {
            self.0 += 1;
        }
        fn count(&self) -> i64 {
            self.0 as i64
        }
    }

    /// Registers the v1 kinds.
    pub fn register_kinds(r: &mut Registry) {
        register::<Avro<Profile>, Vec<u8>>(r, "profiles");
        register::<Protobuf<Session>, Vec<u8>>(r, "sessions");
        register::<Bincode<Person>, Vec<u8>>(r, "people");
        register::<Visits, Vec<u8>>(r, "visits");
    }
}

/// The second version of the kinds.
pub mod v2 {
    pub use super::v1::Visits;
    use super::*;

    /// `profiles`' state: `label` removed, `weight` added (default 1), added to the count per record.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize, apache_avro::AvroSchema)]
    pub struct Profile {
        /// Records seen (times their weight).
        pub count: i64,
        /// What each record adds.
        #[avro(default = "1")]
        pub weight: i64,
    }

    impl Default for Profile {
        fn default() -> Self {
            Profile { count: 0, weight: 1 }
        }
    }

    /// `sessions`' state, field number 2 reused.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Session {
        /// Records seen.
        #[prost(uint64, tag = "1")]
        pub count: u64,
        /// A ratio, under the number v1's label had.
        #[prost(double, tag = "2")]
        pub ratio: f64,
    }

    impl prost_reflect::ReflectMessage for Session {
        fn descriptor(&self) -> prost_reflect::MessageDescriptor {
            message("weir.examples.v2.Session")
        }
    }

    /// `people`' state, a field added (which bincode cannot read old values through).
    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, weir_state::signature::TypeSignature)]
    pub struct Person {
        /// Records seen.
        pub visits: u64,
        /// A name.
        pub name: String,
        /// An email address.
        pub email: String,
    }

    impl Tally for Avro<Profile> {
        fn add(&mut self) {
            self.count += self.weight;
        }
        fn count(&self) -> i64 {
            self.count
        }
    }

    impl Tally for Protobuf<Session> {
        fn add(&mut self) {
            self.count += 1;
        }
        fn count(&self) -> i64 {
            self.count as i64
        }
    }

    impl Tally for Bincode<Person> {
        fn add(&mut self) {
            self.visits += 1;
        }
        fn count(&self) -> i64 {
            self.visits as i64
        }
    }

    /// Registers the v2 kinds (`visits` now keyed by `u64`).
    pub fn register_kinds(r: &mut Registry) {
        register::<Avro<Profile>, Vec<u8>>(r, "profiles");
        register::<Protobuf<Session>, Vec<u8>>(r, "sessions");
        register::<Bincode<Person>, Vec<u8>>(r, "people");
        register::<Visits, u64>(r, "visits");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_common::state::serializer::Resolution;
    use weir_state::resolve;
    use weir_state::signature::serializer_of;

    #[test]
    fn the_versions_resolve_as_the_table_says() {
        let m = |a, b| resolve(&a, &b);
        assert_eq!(
            m(serializer_of::<Avro<v1::Profile>>(), serializer_of::<Avro<v2::Profile>>()),
            Resolution::AfterMigration
        );
        match m(serializer_of::<Protobuf<v1::Session>>(), serializer_of::<Protobuf<v2::Session>>()) {
            Resolution::Incompatible(why) => assert!(why.contains("`string label`") && why.contains("`double ratio`")),
            r => panic!("{r:?}"),
        }
        assert!(matches!(
            m(serializer_of::<Bincode<v1::Person>>(), serializer_of::<Bincode<v2::Person>>()),
            Resolution::Incompatible(_)
        ));
        assert!(matches!(m(serializer_of::<Vec<u8>>(), serializer_of::<u64>()), Resolution::Incompatible(_)));
        // A migrated v1 profile reads in v2 with the default weight, and its count kept.
        let old = serializer_of::<Avro<v1::Profile>>();
        let new = serializer_of::<Avro<v2::Profile>>();
        let migrator = weir_state::Migrator::between(&old, &new).unwrap().unwrap();
        let mut bytes = Vec::new();
        Avro(v1::Profile { count: 41, label: "x".into() }).encode(&mut bytes);
        let mut out = Vec::new();
        migrator.migrate(&bytes, &mut out).unwrap();
        assert_eq!(Avro::<v2::Profile>::decode(&out).unwrap().0, v2::Profile { count: 41, weight: 1 });
    }
}
