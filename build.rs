//! Compiles Envoy's RLS v3 protos and Kuadrant's rate-limit service from `proto/` with protox
//! (pure Rust), so no system `protoc` is needed; and, for gRPC reflection only, the ext_authz
//! and RLQS protos of `proto/envoy-api` (their Rust types come from the `envoy-types` crate).

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "envoy/service/ratelimit/v3/rls.proto",
    "kuadrant/service/ratelimit/v1/ratelimit.proto",
];

/// Services served with `envoy-types`' messages, described to reflection from these files.
const REFLECTED_PROTOS: &[&str] = &[
    "envoy/service/auth/v3/external_auth.proto",
    "envoy/service/rate_limit_quota/v3/rlqs.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("proto");
    println!("cargo:rerun-if-changed={}", root.display());
    let descriptors = protox::compile(PROTOS, [&root])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    // Kept for gRPC reflection.
    std::fs::write(
        out_dir.join("rls_descriptor.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    let reflected = protox::compile(REFLECTED_PROTOS, [root.join("envoy-api")])?;
    std::fs::write(
        out_dir.join("envoy_api_descriptor.bin"),
        prost::Message::encode_to_vec(&reflected),
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
