//! Generates the tonic/prost code of `proto/weir.proto`.

/// The enums that Rust code stores in files and job records as well as sending them: they serialize by their
/// kebab-case names (`rocksdb`, `key-by`, `no-claim`), the names stored before they became protobuf enums.
const STORED_ENUMS: &[&str] = &["StateBackend", "Partitioning", "SavepointFormat", "RestoreMode", "SnapshotFormat"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = tonic_prost_build::configure();
    for name in STORED_ENUMS {
        config = config.type_attribute(
            format!(".weir.v1.{name}"),
            "#[derive(serde::Serialize, serde::Deserialize)] #[serde(rename_all = \"kebab-case\")]",
        );
    }
    config.compile_protos(&["proto/weir.proto"], &["proto"])?;
    Ok(())
}
