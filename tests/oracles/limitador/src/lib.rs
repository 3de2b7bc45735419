//! Nothing: this package is the differential test of `tests/oracle.rs` (floodgate's Limitador
//! limits against the limitador crate 0.14), kept out of floodgate's workspace so that only
//! this test compiles limitador and the crates it alone needs. Cargo asks a package for a
//! library or a binary; this empty library is it.
