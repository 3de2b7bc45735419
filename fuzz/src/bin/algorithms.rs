//! AFL++'s entry point for `algorithms` (see `floodgate_fuzz::algorithms`); `scripts/fuzz.sh algorithms SECONDS`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        floodgate_fuzz::algorithms::run(data);
    });
}
