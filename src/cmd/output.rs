//! What the one-shot subcommands (`check`, `validate`) print. `println!` panics when stdout is
//! closed early (`floodgate validate config/ | head -1`); these end the process as a shell
//! expects instead: quietly on a closed pipe (the exit status a SIGPIPE would give), with a
//! message on any other write error.

use std::fmt::Display;
use std::io::{ErrorKind, Write};

/// 128 + SIGPIPE, what a shell reports for a process its closed pipe stopped.
const EXIT_BROKEN_PIPE: i32 = 141;
/// sysexits' EX_IOERR.
const EXIT_IO_ERROR: i32 = 74;

/// Writes `text` to stdout as it is.
pub fn print(text: impl Display) {
    let mut stdout = std::io::stdout().lock();
    let written = write!(stdout, "{text}").and_then(|()| stdout.flush());
    if let Err(error) = written {
        if error.kind() == ErrorKind::BrokenPipe {
            std::process::exit(EXIT_BROKEN_PIPE);
        }
        eprintln!("floodgate: cannot write to stdout: {error}");
        std::process::exit(EXIT_IO_ERROR);
    }
}

/// Writes `line` and a newline to stdout.
pub fn print_line(line: impl Display) {
    print(format_args!("{line}\n"));
}
