//! AFL++'s entry point for `grpc_request` (see `floodgate_fuzz::grpc_request`); `scripts/fuzz.sh grpc_request SECONDS`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        floodgate_fuzz::grpc_request::run(data);
    });
}
