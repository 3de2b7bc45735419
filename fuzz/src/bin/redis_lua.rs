//! AFL++'s entry point for `redis_lua` (see `floodgate_fuzz::redis_lua`): the server's URL is
//! in `FLOODGATE_FUZZ_REDIS_URL`; `scripts/fuzz.sh redis_lua SECONDS` starts one.

use std::panic::AssertUnwindSafe;
use std::sync::OnceLock;

use floodgate_fuzz::redis_lua::Harness;

fn main() {
    // Connected on the first input, so in each process AFL++ forks, never in the fork server.
    // A panic is a finding: AFL++ records it and starts a new process, so no half-updated
    // harness is used again.
    let harness: AssertUnwindSafe<OnceLock<Harness>> = AssertUnwindSafe(OnceLock::new());
    afl::fuzz!(|data: &[u8]| {
        let harness = harness.get_or_init(|| {
            let url = std::env::var("FLOODGATE_FUZZ_REDIS_URL").unwrap_or_else(|_| {
                panic!("FLOODGATE_FUZZ_REDIS_URL is not set: run scripts/fuzz.sh")
            });
            Harness::connect(&url)
        });
        harness.run(data);
    });
}
