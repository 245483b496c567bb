//! Compiles the `.proto` files with protox (pure Rust), so building needs no system `protoc`,
//! and writes the public API's file descriptor set for gRPC reflection.

use std::path::PathBuf;

/// The Raft-internal service between nodes.
const INTERNAL: &[&str] = &["proto/rowcall/raft.proto"];
/// The public API, `rowcall.v1`.
const PUBLIC: &[&str] = &["proto/rowcall/v1/types.proto", "proto/rowcall/v1/api.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Globs are not expanded by cargo: name every file.
    for proto in INTERNAL.iter().chain(PUBLIC) {
        println!("cargo:rerun-if-changed={proto}");
    }
    let all: Vec<&str> = INTERNAL.iter().chain(PUBLIC).copied().collect();
    let descriptors = protox::compile(&all, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;

    // Reflection serves the public files only (the Raft service is not for clients), with
    // their imports (google/protobuf/struct.proto) so a client can resolve every type, and
    // with comments, so the API documents itself.
    let mut public = protox::Compiler::new(["proto"])?;
    public.include_imports(true).include_source_info(true);
    public.open_files(PUBLIC)?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("rowcall_v1_descriptor.bin"),
        public.encode_file_descriptor_set(),
    )?;
    Ok(())
}
