//! Generates the tonic peer's service code from `proto/echo.proto` with the protoc binary
//! shipped in `protoc-bin-vendored`, so the harness builds without a system protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/echo.proto");
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        .build_transport(false)
        .compile_with_config(config, &["proto/echo.proto"], &["proto"])?;
    Ok(())
}
