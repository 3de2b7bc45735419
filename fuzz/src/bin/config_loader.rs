//! AFL++'s entry point for `config_loader` (see `floodgate_fuzz::config_loader`); `scripts/fuzz.sh config_loader SECONDS`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        floodgate_fuzz::config_loader::run(data);
    });
}
