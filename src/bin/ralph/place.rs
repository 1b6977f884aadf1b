//! Where a command works, found the way git finds its repository: from the current
//! directory (or `-C DIR`, as if started there), upward to the first folder with a
//! `ralph.toml` or a `.ralph/`, never past the top of the git repository. Spec paths on the
//! command line are taken from that same starting directory, as in every CLI, and made
//! relative to the workspace, where the library's one rule for spec paths applies. The other
//! files a command line names (`--script`, `thread new --spec`, `thread edit --file`) are
//! taken from that starting directory too, wherever they are.

use std::path::{Component, Path, PathBuf};

use crate::Result;

/// The workspace of a command, and the directory it started from.
#[derive(Debug)]
pub(crate) struct Place {
    /// The workspace as the person reaches it from where they ran ralph: `.`, the `-C` path,
    /// or either with `..` for each level walked up. The library takes it as it is, and the
    /// `next:` commands repeat it after `-C`.
    pub(crate) workspace: PathBuf,
    /// The starting directory, canonical: relative spec paths are relative to it.
    base: PathBuf,
    /// The workspace, canonical.
    root: PathBuf,
    /// The `-C` directory as given; `None` without `-C` (the current directory).
    start: Option<PathBuf>,
}

impl Place {
    /// The starting directory itself (`.`, or `-C DIR`), not searched upward: `init` writes
    /// where it is run.
    ///
    /// # Errors
    ///
    /// When `-C DIR` does not exist or is not a directory, naming it.
    pub(crate) fn here(given: Option<&Path>) -> Result<Place> {
        let workspace = given.unwrap_or(Path::new(".")).to_path_buf();
        let base = start(&workspace)?;
        Ok(Place {
            workspace,
            root: base.clone(),
            base,
            start: given.map(Path::to_path_buf),
        })
    }

    /// The workspace found upward from the starting directory; the starting directory itself
    /// when no folder up to the top of its git repository is a workspace (or outside git).
    ///
    /// # Errors
    ///
    /// When `-C DIR` does not exist or is not a directory, naming it.
    pub(crate) fn find(given: Option<&Path>) -> Result<Place> {
        let mut place = Place::here(given)?;
        let Some(root) = found_upward(&place.base) else {
            return Ok(place);
        };
        let up = place.base.components().count() - root.components().count();
        if up > 0 {
            let ups: PathBuf = std::iter::repeat_n("..", up).collect();
            place.workspace = match given {
                Some(dir) => dir.join(ups),
                None => ups,
            };
        }
        place.root = root;
        Ok(place)
    }

    /// `given` (relative to the starting directory, or absolute) as a path relative to the
    /// workspace; the library then checks it against the rule every mode applies.
    ///
    /// # Errors
    ///
    /// When it points outside the workspace, naming the path and the workspace.
    pub(crate) fn spec(&self, given: &Path) -> Result<PathBuf> {
        let full = normal(&self.base.join(given));
        let inside = |p: &Path| p.strip_prefix(&self.root).ok().map(Path::to_path_buf);
        // Through symlinks in the path itself (a `/tmp` that is a link), when it exists.
        let rel = inside(&full).or_else(|| inside(&full.canonicalize().ok()?));
        match rel {
            Some(rel) if !rel.as_os_str().is_empty() => Ok(rel),
            _ => Err(format!(
                "spec path {:?} is outside the workspace {}: a spec must be a file inside it",
                given.display().to_string(),
                self.root.display()
            )
            .into()),
        }
    }

    /// A file named on the command line (`--script`, `thread new --spec`, `--file`), as
    /// this process opens it: relative to the starting directory (`-C DIR`, as if started
    /// there), or absolute. Unlike a spec it may be anywhere.
    pub(crate) fn file(&self, given: &Path) -> PathBuf {
        match &self.start {
            Some(dir) => dir.join(given),
            None => given.to_path_buf(),
        }
    }

    /// `given` of each path, as [`spec`](Self::spec) makes it.
    pub(crate) fn specs(&self, given: Vec<PathBuf>) -> Result<Vec<PathBuf>> {
        given.iter().map(|p| self.spec(p)).collect()
    }
}

/// The starting directory, canonical; a `-C` that is missing or a file is that error.
fn start(dir: &Path) -> Result<PathBuf> {
    let refuse = |why: String| format!("workspace {}: {why}", dir.display());
    let real = dir.canonicalize().map_err(|e| refuse(e.to_string()))?;
    if !real.is_dir() {
        return Err(refuse("is not a directory".into()).into());
    }
    Ok(real)
}

/// The nearest folder from `base` upward that holds `ralph.toml` or `.ralph/`, stopping at
/// the top of the git repository; `None` outside a git repository (no search: a stray
/// `.ralph/` in a parent folder must not capture an unrelated directory) or when none has
/// them.
fn found_upward(base: &Path) -> Option<PathBuf> {
    let top = base.ancestors().find(|d| d.join(".git").exists())?;
    base.ancestors()
        .take_while(|d| d.starts_with(top))
        .find(|d| d.join("ralph.toml").is_file() || d.join(".ralph").is_dir())
        .map(Path::to_path_buf)
}

/// `path` with `.` dropped and each `..` taking off the folder before it, without asking the
/// file system (the file may not exist yet; the library says so, naming it).
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_drops_dots_and_climbs_on_dot_dot() {
        assert_eq!(normal(Path::new("/a/./b/../c")), Path::new("/a/c"));
    }
}
