//! The arguments that make bubblewrap confine a process as a [`Sandbox`](super::Sandbox)
//! says.
//!
//! bubblewrap applies its mounts in the order given, and a later mount on a path inside an
//! earlier one covers that part of it; each source is read from the file system as it is
//! outside, not as the sandbox sees it so far. So the mounts are ordered by depth, shallow
//! first: a writable work tree, then a read-only `.git` inside it, then a writable task tree
//! inside a read-only `.ralph/`. Paths that do not exist are passed over (a mount needs its
//! source), and so are rules that change nothing (a protected path outside every writable
//! one is read-only already).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::Access;

/// Folders every confined process gets empty and private: the temporary folders, which
/// hold other programs' files and sockets (an X server's, tmux's, an ssh agent's).
const PRIVATE: [&str; 2] = ["/tmp", "/var/tmp"];

/// What to confine and what to run.
pub(super) struct Plan<'a> {
    /// Whether bubblewrap makes a user namespace of its own and forbids more in it.
    pub(super) userns: bool,
    pub(super) paths: &'a [(PathBuf, Access)],
    pub(super) network: bool,
    pub(super) cwd: Option<&'a Path>,
    pub(super) program: &'a OsStr,
    pub(super) args: &'a [OsString],
}

/// One mount of the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mount {
    /// A writable bind of the path onto itself.
    Write,
    /// A read-only bind of the path onto itself.
    ReadOnly,
    /// An empty tmpfs over a folder.
    EmptyDir,
    /// `/dev/null` over a file (or a socket).
    EmptyFile,
}

/// bubblewrap's arguments for `plan`, the program and its arguments last.
pub(super) fn arguments(plan: &Plan<'_>) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "--new-session",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
    ]
    .map(OsString::from)
    .into();
    if plan.userns {
        args.extend(["--unshare-user", "--disable-userns"].map(OsString::from));
    }
    if !plan.network {
        args.push("--unshare-net".into());
    }
    args.extend(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"].map(OsString::from));
    for dir in PRIVATE.iter().filter(|d| Path::new(d).is_dir()) {
        args.extend(["--tmpfs".into(), OsString::from(dir)]);
    }
    for (path, mount) in mounts(plan.paths) {
        let (flag, source) = match mount {
            Mount::Write => ("--bind", path.as_os_str()),
            Mount::ReadOnly => ("--ro-bind", path.as_os_str()),
            Mount::EmptyDir => ("--tmpfs", OsStr::new("")),
            Mount::EmptyFile => ("--ro-bind", OsStr::new("/dev/null")),
        };
        args.push(flag.into());
        if !source.is_empty() {
            args.push(source.to_owned());
        }
        args.push(path.into_os_string());
    }
    if let Some(cwd) = plan.cwd {
        args.extend(["--chdir".into(), cwd.as_os_str().to_owned()]);
    }
    args.push("--".into());
    args.push(plan.program.to_owned());
    args.extend(plan.args.iter().cloned());
    args
}

/// The mounts for `paths`, in the order to apply them.
fn mounts(paths: &[(PathBuf, Access)]) -> Vec<(PathBuf, Mount)> {
    // One access per path, the strongest (the order of `Access`).
    let mut rules: BTreeMap<&Path, Access> = BTreeMap::new();
    for (path, access) in paths.iter().filter(|(p, _)| p.is_absolute()) {
        let rule = rules.entry(path.as_path()).or_insert(*access);
        *rule = (*rule).max(*access);
    }
    let mut mounts = Vec::new();
    for (&path, &access) in &rules {
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        match access {
            Access::Write => mounts.push((path.to_path_buf(), Mount::Write)),
            Access::Read if hidden(path, &rules) => {
                mounts.push((path.to_path_buf(), Mount::ReadOnly));
            }
            Access::Read => {}
            Access::Protect => match between_writable(path, &rules) {
                Some(keep) => {
                    mounts.extend(keep.into_iter().map(|dir| (dir, Mount::Write)));
                    mounts.push((path.to_path_buf(), Mount::ReadOnly));
                }
                // Readable is part of protected: shown where the sandbox would hide it.
                None if hidden(path, &rules) && !protected_above(path, &rules) => {
                    mounts.push((path.to_path_buf(), Mount::ReadOnly));
                }
                None => {}
            },
            Access::Hide if private(path) => {}
            Access::Hide if meta.is_dir() => mounts.push((path.to_path_buf(), Mount::EmptyDir)),
            Access::Hide => mounts.push((path.to_path_buf(), Mount::EmptyFile)),
        }
    }
    // Shallow first. A folder kept in place for two protected files is one mount, and a
    // folder both kept in place and readable is kept writable.
    mounts.sort_by(|(a, am), (b, bm)| {
        (a.components().count(), a, *am != Mount::Write).cmp(&(
            b.components().count(),
            b,
            *bm != Mount::Write,
        ))
    });
    mounts.dedup_by(|later, first| later.0 == first.0);
    mounts
}

/// Whether `path` lies in a private temporary folder, which the sandbox empties anyway.
fn private(path: &Path) -> bool {
    PRIVATE.iter().any(|dir| path.starts_with(dir))
}

/// Whether the sandbox would hide `path`: in a private folder or under a hidden path.
fn hidden(path: &Path, rules: &BTreeMap<&Path, Access>) -> bool {
    private(path)
        || path
            .ancestors()
            .skip(1)
            .any(|a| rules.get(a) == Some(&Access::Hide))
}

/// Whether a folder holding `path` is protected: then it is shown read-only already.
fn protected_above(path: &Path, rules: &BTreeMap<&Path, Access>) -> bool {
    path.ancestors()
        .skip(1)
        .any(|a| rules.get(a) == Some(&Access::Protect))
}

/// For a protected `path`: the folders between it and the nearest writable folder holding
/// it, each made a mount point of its own so that it cannot be renamed; `None` when no
/// writable folder holds it, or a protected or hidden one is nearer (it is read-only or
/// unseen already).
fn between_writable(path: &Path, rules: &BTreeMap<&Path, Access>) -> Option<Vec<PathBuf>> {
    let mut keep = Vec::new();
    for dir in path.ancestors().skip(1) {
        match rules.get(dir) {
            Some(Access::Write) => return Some(keep),
            Some(Access::Protect | Access::Hide) => return None,
            Some(Access::Read) | None => keep.push(dir.to_path_buf()),
        }
    }
    // Under a private folder, a folder of the plan would have held it.
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_mounts(paths: &[(&Path, Access)]) -> Vec<(PathBuf, Mount)> {
        let paths: Vec<(PathBuf, Access)> =
            paths.iter().map(|(p, a)| (p.to_path_buf(), *a)).collect();
        mounts(&paths)
    }

    #[test]
    fn mounts_go_shallow_first_with_each_folder_above_a_protected_file_kept_in_place() {
        let ws = tempfile::tempdir().unwrap();
        let ws = ws.path();
        std::fs::create_dir_all(ws.join("docs/specs")).unwrap();
        std::fs::write(ws.join("docs/specs/a.md"), "a").unwrap();
        std::fs::create_dir_all(ws.join(".ralph/worktrees/t-1")).unwrap();
        std::fs::write(ws.join(".ralph/worktrees/t-1/.git"), "gitdir: x").unwrap();
        let got = plan_mounts(&[
            (&ws.join(".ralph/worktrees/t-1/.git"), Access::Protect),
            (&ws.join("docs/specs/a.md"), Access::Protect),
            (&ws.join(".ralph/worktrees/t-1"), Access::Write),
            (&ws.join(".ralph"), Access::Protect),
            (ws, Access::Write),
            (&ws.join("missing"), Access::Protect),
        ]);
        let expected = vec![
            (ws.to_path_buf(), Mount::Write),
            (ws.join(".ralph"), Mount::ReadOnly),
            (ws.join("docs"), Mount::Write),
            (ws.join("docs/specs"), Mount::Write),
            (ws.join(".ralph/worktrees/t-1"), Mount::Write),
            (ws.join("docs/specs/a.md"), Mount::ReadOnly),
            (ws.join(".ralph/worktrees/t-1/.git"), Mount::ReadOnly),
        ];
        assert_eq!(got, expected);
    }

    #[test]
    fn the_strongest_access_wins_and_rules_that_change_nothing_are_dropped() {
        let ws = tempfile::tempdir().unwrap();
        let ws = ws.path();
        std::fs::write(ws.join("f"), "").unwrap();
        let got = plan_mounts(&[
            (ws, Access::Write),
            (ws, Access::Protect),
            (&ws.join("f"), Access::Protect),
            (Path::new("/etc"), Access::Read),
            (Path::new("/tmp/x"), Access::Hide),
        ]);
        // The work tree is protected as a whole: the file in it is read-only already, and
        // the tree is shown read-only although it lies in the private /tmp.
        assert_eq!(got, vec![(ws.to_path_buf(), Mount::ReadOnly)]);
    }

    #[test]
    fn hidden_folders_are_emptied_and_hidden_files_nulled() {
        // A folder outside the private /tmp, where hiding changes nothing (a clone of the
        // project may itself lie in /tmp).
        let outside = [env!("CARGO_MANIFEST_DIR"), "/dev/shm"]
            .into_iter()
            .find(|dir| {
                !PRIVATE
                    .iter()
                    .any(|private| Path::new(dir).starts_with(private))
            })
            .unwrap();
        let home = tempfile::tempdir_in(outside).unwrap();
        let home = home.path();
        std::fs::create_dir(home.join(".ssh")).unwrap();
        std::fs::write(home.join(".netrc"), "machine x password y").unwrap();
        let got = plan_mounts(&[
            (&home.join(".ssh"), Access::Hide),
            (&home.join(".netrc"), Access::Hide),
        ]);
        assert_eq!(
            got,
            vec![
                (home.join(".netrc"), Mount::EmptyFile),
                (home.join(".ssh"), Mount::EmptyDir),
            ]
        );
    }

    #[test]
    fn the_program_comes_last_after_the_working_directory() {
        let args = arguments(&Plan {
            userns: true,
            paths: &[],
            network: false,
            cwd: Some(Path::new("/w")),
            program: OsStr::new("sh"),
            args: &["-c".into(), "true".into()],
        });
        let tail: Vec<&OsStr> = args
            .iter()
            .rev()
            .take(6)
            .rev()
            .map(|a| a.as_os_str())
            .collect();
        assert_eq!(tail, ["--chdir", "/w", "--", "sh", "-c", "true"]);
        assert!(args.iter().any(|a| a == "--unshare-net"));
        assert!(args.iter().any(|a| a == "--disable-userns"));
    }
}
