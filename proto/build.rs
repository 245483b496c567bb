//! Compiles the `.proto` files with protox (pure Rust), so building needs no system `protoc`.

const PROTOS: &[&str] = &["proto/rowcall/raft.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Globs are not expanded by cargo: name every file.
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(PROTOS, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
