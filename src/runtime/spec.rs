//! A spec file as every mode reads it: the one rule for its path, and its text bounded for
//! a prompt.

use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use super::error::Error;
use crate::output::truncate_middle;

/// How much of a spec goes into a prompt; agents can read the file for the rest.
const SPEC_PROMPT_BYTES: usize = 16 * 1024;

/// The one rule for a spec path, in every mode: `given` is relative, does not go up with
/// `..`, names an existing file, and resolves (symlinks followed) inside `root`, a folder of
/// `workspace` (the workspace itself, or a mode's specs folder). Returns the path relative
/// to `root`.
///
/// # Errors
///
/// [`Error::SpecPath`] saying which part of the rule the path breaks.
pub(crate) fn inside(workspace: &Path, root: &Path, given: &Path) -> Result<PathBuf, Error> {
    let refuse = |reason: String| Error::SpecPath {
        path: given.to_string_lossy().into_owned(),
        reason,
    };
    if given.is_absolute() {
        return Err(refuse(
            "is absolute; give it relative to the workspace".into(),
        ));
    }
    if given.components().any(|c| c == Component::ParentDir) {
        return Err(refuse("goes up with `..`".into()));
    }
    let real_root = workspace
        .join(root)
        .canonicalize()
        .map_err(|e| refuse(format!("has no folder {}: {e}", root.display())))?;
    let real = workspace
        .join(given)
        .canonicalize()
        .map_err(|e| refuse(format!("cannot be read: {e}")))?;
    match real.strip_prefix(&real_root) {
        Ok(rel) if !rel.as_os_str().is_empty() => Ok(rel.to_path_buf()),
        Ok(_) => Err(refuse("names a folder, not a file".into())),
        Err(_) if root.as_os_str().is_empty() || root == Path::new(".") => Err(refuse(format!(
            "resolves to {}, outside the workspace",
            real.display()
        ))),
        Err(_) => Err(refuse(format!(
            "resolves to {}, outside the folder {}",
            real.display(),
            root.display()
        ))),
    }
}

/// The spec `given` as a construct run takes it: the path rule with the workspace as the
/// root ([`inside`]), then its text ([`read`]). Returns the path relative to the workspace.
///
/// # Errors
///
/// As [`inside`] and [`read`].
pub(crate) fn check(workspace: &Path, given: &Path) -> Result<PathBuf, Error> {
    let rel = inside(workspace, Path::new(""), given)?;
    read(workspace, &rel)?;
    Ok(rel)
}

/// A spec file's text as prompts carry it: checked ([`checked`]), trimmed, bounded to
/// [`SPEC_PROMPT_BYTES`]; the agent can read the file for the rest.
///
/// # Errors
///
/// [`Error::Spec`] naming the file when it cannot be read; [`Error::SpecText`] when it is
/// empty, not UTF-8, or holds control characters.
pub(crate) fn for_prompt(workspace: &Path, rel: impl AsRef<Path>) -> Result<String, Error> {
    Ok(read(workspace, rel)?.prompt)
}

/// A spec as read for a prompt: the text the prompt carries, and the file's size.
#[derive(Clone, Debug)]
pub(crate) struct SpecText {
    /// The text, trimmed and bounded to [`SPEC_PROMPT_BYTES`] (head and tail kept).
    pub(crate) prompt: String,
    /// The file's size in bytes.
    pub(crate) bytes: usize,
}

impl SpecText {
    /// When only part of the spec reaches the agent: how much, said for a person.
    pub(crate) fn cut_note(&self) -> Option<String> {
        let trimmed = self.prompt.len() < self.bytes && self.bytes > SPEC_PROMPT_BYTES;
        trimmed.then(|| {
            format!(
                "{} bytes; prompts carry {} bytes of it (its head and tail), the agent can read \
                 the file for the rest",
                self.bytes,
                self.prompt.len()
            )
        })
    }
}

/// Reads and checks the spec at `rel` (relative to `workspace`).
///
/// # Errors
///
/// As [`for_prompt`].
pub(crate) fn read(workspace: &Path, rel: impl AsRef<Path>) -> Result<SpecText, Error> {
    let path = workspace.join(rel);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(source) => return Err(Error::Spec { path, source }),
    };
    let text = match checked(&bytes) {
        Ok(text) => text,
        Err(reason) => return Err(Error::SpecText { path, reason }),
    };
    Ok(SpecText {
        prompt: truncate_middle(text.trim(), SPEC_PROMPT_BYTES),
        bytes: bytes.len(),
    })
}

/// The spec's text when an agent can work from it: refused when it is not UTF-8 or holds a
/// control character other than tab, CR and LF (a binary file, escape codes that would
/// reach the agent and the terminal as they are), each with its byte offset; or when it
/// holds nothing but blanks (the agent would invent the work).
fn checked(bytes: &[u8]) -> Result<&str, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        format!(
            "is not UTF-8 text: invalid byte 0x{:02X} at byte offset {}",
            bytes[e.valid_up_to()],
            e.valid_up_to()
        )
    })?;
    let control = text
        .char_indices()
        .find(|(_, c)| c.is_control() && !matches!(c, '\t' | '\r' | '\n'));
    if let Some((at, c)) = control {
        return Err(format!(
            "holds the control character U+{:04X} at byte offset {at}: a spec is text, and \
             tab, CR and LF are its only control characters",
            u32::from(c)
        ));
    }
    if text.trim().is_empty() {
        return Err("is empty: write what to build in it".into());
    }
    Ok(text)
}

/// The spec being worked on, as prompts see it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SpecDoc {
    pub(crate) name: String,
    pub(crate) path: String,
    pub(crate) text: String,
}

impl SpecDoc {
    /// Reads the spec at `rel` (relative to the workspace); its name is its first `# `
    /// heading, else its file stem.
    pub(crate) fn read(workspace: &Path, rel: &str) -> Result<Self, Error> {
        let text = for_prompt(workspace, rel)?;
        let name = text
            .lines()
            .find_map(|l| l.strip_prefix("# "))
            .map(|t| t.trim().to_owned())
            .unwrap_or_else(|| {
                Path::new(rel)
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| rel.to_owned())
            });
        Ok(SpecDoc {
            name,
            path: rel.to_owned(),
            text,
        })
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    use super::*;

    #[test]
    fn empty_binary_and_escape_coded_specs_are_refused_with_the_offset() {
        for (bytes, said) in [
            (&b""[..], "is empty"),
            (b" \n\t\r\n", "is empty"),
            (b"# ok\n\xFFrest", "invalid byte 0xFF at byte offset 5"),
            (b"# ok\nred \x1b[31m", "U+001B at byte offset 9"),
            (b"nul\0", "U+0000 at byte offset 3"),
        ] {
            let err = checked(bytes).unwrap_err();
            assert!(err.contains(said), "{bytes:?}: {err}");
        }
        assert_eq!(
            checked(b"# Spec\r\n\tindented\n").unwrap(),
            "# Spec\r\n\tindented\n"
        );
    }

    #[test]
    fn a_long_spec_says_how_much_reaches_the_agent() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("short.md"), "# Short\n").unwrap();
        std::fs::write(dir.path().join("long.md"), "x".repeat(100_000)).unwrap();
        assert_eq!(read(dir.path(), "short.md").unwrap().cut_note(), None);
        let note = read(dir.path(), "long.md").unwrap().cut_note().unwrap();
        assert!(note.starts_with("100000 bytes; prompts carry"), "{note}");
        let err = read(dir.path(), "nope.md").unwrap_err().to_string();
        assert!(err.contains("nope.md"), "{err}");
    }

    #[test]
    fn the_rule_refuses_every_way_out_and_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("specs")).unwrap();
        std::fs::write(ws.join("spec.md"), "# x").unwrap();
        std::fs::write(ws.join("specs/a.md"), "# a").unwrap();
        std::fs::write(dir.path().join("outside.md"), "secret").unwrap();
        std::os::unix::fs::symlink(dir.path().join("outside.md"), ws.join("link.md")).unwrap();
        let root = Path::new("");
        assert_eq!(
            inside(&ws, root, Path::new("spec.md")).unwrap(),
            Path::new("spec.md")
        );
        assert_eq!(
            inside(&ws, Path::new("specs"), Path::new("specs/a.md")).unwrap(),
            Path::new("a.md")
        );
        for (given, why) in [
            ("/etc/passwd", "is absolute"),
            ("../outside.md", "goes up"),
            ("link.md", "outside the workspace"),
            ("nope.md", "cannot be read"),
        ] {
            let err = inside(&ws, root, Path::new(given)).unwrap_err().to_string();
            assert!(err.contains(given) && err.contains(why), "{given}: {err}");
        }
        let err = inside(&ws, Path::new("specs"), Path::new("spec.md"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("outside the folder specs"), "{err}");
    }
}
