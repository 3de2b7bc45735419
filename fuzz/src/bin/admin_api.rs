//! AFL++'s entry point for `admin_api` (see `floodgate_fuzz::admin_api`); `scripts/fuzz.sh admin_api SECONDS`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        floodgate_fuzz::admin_api::run(data);
    });
}
