//! Printing on stdout that ends the command quietly when the reader is gone (`ralph demo |
//! head -1`), as SIGPIPE ends other commands; `println!` would panic there. SIGPIPE itself
//! stays ignored: restoring it would also kill ralph when an agent closes its stdin early.

use std::borrow::Cow;
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

/// `text` from elsewhere (an agent's task name, a record edited by hand) made safe to print
/// in a line: each control character shown as its escape (`\u{1b}`, `\t`, `\n`). Printed
/// raw, ESC would drive the reader's terminal and a tab or line break would break the line.
pub(crate) fn inert(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let escape = |c: char| match c.is_control() {
        true => c.escape_default().to_string(),
        false => c.to_string(),
    };
    Cow::Owned(text.chars().map(escape).collect())
}

#[cfg(test)]
mod tests {
    use super::inert;

    #[test]
    fn control_characters_are_shown_as_escapes_and_the_rest_as_it_is() {
        assert_eq!(inert("plain — ü"), "plain — ü");
        assert_eq!(
            inert("esc\u{1b}[31mred\tx\u{9b}"),
            "esc\\u{1b}[31mred\\tx\\u{9b}"
        );
    }
}
