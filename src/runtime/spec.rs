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

/// A spec file's text as prompts carry it: read as bytes (non-UTF-8 shown lossily), trimmed,
/// bounded to [`SPEC_PROMPT_BYTES`]; the agent can read the file for the rest.
///
/// # Errors
///
/// [`Error::Spec`] naming the file when it cannot be read.
pub(crate) fn for_prompt(workspace: &Path, rel: impl AsRef<Path>) -> Result<String, Error> {
    let path = workspace.join(rel);
    let bytes = std::fs::read(&path).map_err(|source| Error::Spec { path, source })?;
    Ok(truncate_middle(
        String::from_utf8_lossy(&bytes).trim(),
        SPEC_PROMPT_BYTES,
    ))
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
mod tests {
    use super::*;

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
