//! Generates the tonic/prost code of `proto/weir.proto`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_prost_build::configure().compile_protos(&["proto/weir.proto"], &["proto"])?;
    Ok(())
}
