//! Compiles the protobuf API with a vendored `protoc`, so no system package is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out_dir.join("fairway_descriptor.bin"))
        // Undecodable requests are the caller's error: INVALID_ARGUMENT.
        .codec_path("crate::api::codec::StrictCodec")
        .compile_with_config(
            config,
            &[
                "proto/fairway/v1/matching.proto",
                "proto/fairway/v1/storage.proto",
                "proto/fairway/v1/visits.proto",
                "proto/fairway/v1/schedules.proto",
            ],
            &["proto"],
        )?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
