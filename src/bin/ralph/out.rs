//! Printing on stdout that ends the command quietly when the reader is gone (`ralph demo |
//! head -1`), as SIGPIPE ends other commands; `println!` would panic there. SIGPIPE itself
//! stays ignored: restoring it would also kill ralph when an agent closes its stdin early.

use std::io::Write;

/// The exit code of a command ended by SIGPIPE (128 + 13), as a shell reports it.
const BROKEN_PIPE: i32 = 141;

/// `println!`, but a closed stdout ends the command quietly (exit 141, nothing on stderr)
/// instead of panicking.
macro_rules! out {
    () => {
        $crate::out::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}
pub(crate) use out;

/// Writes `text` and a newline to stdout; see [`out!`].
pub(crate) fn line(text: std::fmt::Arguments<'_>) {
    write(|out| writeln!(out, "{text}"));
}

/// `print!`: `text` as it is, with no newline added.
pub(crate) fn text(text: &str) {
    write(|out| out.write_all(text.as_bytes()));
}

/// Runs `put` on the locked stdout and flushes. The state every command saves is saved
/// before it prints, so ending here loses nothing.
fn write(put: impl FnOnce(&mut std::io::StdoutLock<'static>) -> std::io::Result<()>) {
    let mut out = std::io::stdout().lock();
    match put(&mut out).and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(BROKEN_PIPE),
        Err(e) => {
            eprintln!("ralph: cannot write to stdout: {e}");
            std::process::exit(1);
        }
    }
}
