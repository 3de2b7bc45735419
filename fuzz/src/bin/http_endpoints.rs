//! AFL++'s entry point for `http_endpoints` (see `floodgate_fuzz::http_endpoints`); `scripts/fuzz.sh http_endpoints SECONDS`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        floodgate_fuzz::http_endpoints::run(data);
    });
}
