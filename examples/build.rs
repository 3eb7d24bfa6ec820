//! Compiles the example Protobuf state messages, keeping their descriptors for `prost-reflect`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    prost_build::Config::new()
        .file_descriptor_set_path(out.join("sessions.bin"))
        .compile_protos(&["proto/sessions_v1.proto", "proto/sessions_v2.proto"], &["proto"])?;
    Ok(())
}
