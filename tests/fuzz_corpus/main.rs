//! Every file of `fuzz/corpus/<target>/` through its fuzz target's function (`floodgate_fuzz`),
//! as AFL++ runs it: the corpora (seeds, what the long runs kept, and every crash found, fixed)
//! replay as plain tests, with no AFL++ needed. One test per target; a failure names the file.

mod replay;
