//! The plan files of build mode: before a spec is implemented, a read-only planner writes a
//! plan; the verifier may invalidate it; a restarted ralph resumes from the files alone.
//!
//! ```text
//! specs/
//!   0001-foo.md                 the spec
//!   plans/
//!     0001-foo.md               the active plan (human-readable)
//!     0001-foo.json             its metadata: status, attempt, timestamps, reason
//!     0001-foo.attempt-1.md     an invalidated plan, kept for reference
//!     area/0002-bar.md          nested specs are mirrored
//! ```
//!
//! `<rel>` is the spec's path inside the specs folder without its extension. A spec path
//! that leaves the specs folder (`..`, an absolute path, a symlink pointing out) is refused.
//!
//! What to do on start is [`decide`], a pure function of the metadata and whether the plan
//! file exists:
//!
//! | `<rel>.json` | `<rel>.md` | [`Resume`] |
//! |---|---|---|
//! | missing | missing | [`Resume::Fresh`]: plan |
//! | `active` | present | [`Resume::UseActive`]: skip planning |
//! | `invalidated` | any | [`Resume::Replan`]: plan again with the old plan and the reason |
//! | missing | present | [`Resume::Adopt`]: a hand-written plan; create the json |
//! | `active` | missing | [`Resume::Replan`] (the plan file is gone; no reason) |
//!
//! A `<rel>.md` still in place beside an `invalidated` json (a person invalidated the plan
//! by hand) is first kept as `<rel>.attempt-N.md`, where ralph's own invalidation puts it
//! ([`PlanFiles::keep_invalidated`]), so the re-planner is shown it.
//!
//! ```
//! use ralph::specs::plan_files::{PlanFiles, Resume};
//!
//! let ws = tempfile::tempdir()?;
//! std::fs::create_dir_all(ws.path().join("specs/area"))?;
//! std::fs::write(ws.path().join("specs/area/0002-bar.md"), "# Bar\n")?;
//! let plans = PlanFiles::new(ws.path(), "specs");
//! let rel = plans.spec_rel("specs/area/0002-bar.md")?;
//! assert_eq!(rel, "area/0002-bar");
//! assert_eq!(plans.resume(&rel)?, Resume::Fresh);
//!
//! plans.write_plan(&rel, "0002-bar", "# Plan: 0002-bar\n1. Do it.\n", 1)?;
//! assert!(ws.path().join("specs/plans/area/0002-bar.md").exists());
//! assert_eq!(plans.resume(&rel)?, Resume::UseActive);
//!
//! plans.invalidate(&rel, "wrong crate")?;
//! assert!(ws.path().join("specs/plans/area/0002-bar.attempt-1.md").exists());
//! assert_eq!(plans.resume(&rel)?, Resume::Replan { attempt: 2, reason: Some("wrong crate".into()) });
//!
//! assert!(plans.spec_rel("specs/../secrets.md").is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::files::atomic;
use crate::runtime::error::Error;
use crate::runtime::spec;
use crate::store::StoreError;

/// Whether a plan is in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PlanStatus {
    /// The plan guides the implementer.
    Active,
    /// The verifier found its approach wrong; a new plan is needed.
    Invalidated,
}

/// `specs/plans/<rel>.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PlanInfo {
    /// The spec's path inside the specs folder, without extension.
    pub spec_rel: String,
    /// The spec's id.
    pub spec_id: String,
    /// Active or invalidated.
    pub status: PlanStatus,
    /// RFC 3339 time the plan was written (or adopted).
    pub created_at_utc: String,
    /// RFC 3339 time it was invalidated.
    #[serde(default)]
    pub invalidated_at_utc: Option<String>,
    /// The verifier's reason.
    #[serde(default)]
    pub invalidation_reason: Option<String>,
    /// 1 for the first plan of the spec, one more for each re-plan.
    pub attempt: u32,
    /// Fields ralph does not know, kept as they were.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl PlanInfo {
    /// An active plan's metadata, written now.
    fn active(rel: &str, spec_id: &str, attempt: u32) -> Self {
        PlanInfo {
            spec_rel: rel.to_owned(),
            spec_id: spec_id.to_owned(),
            status: PlanStatus::Active,
            created_at_utc: crate::time::now_rfc3339(),
            invalidated_at_utc: None,
            invalidation_reason: None,
            attempt,
            extra: Map::new(),
        }
    }
}

/// What to do about a spec's plan before implementing it. See [`decide`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resume {
    /// No plan: run the planner (attempt 1).
    Fresh,
    /// An active plan exists: skip planning.
    UseActive,
    /// Run the planner again, as `attempt`, with the previous plan and `reason` as context.
    Replan {
        /// The new plan's attempt number.
        attempt: u32,
        /// Why the previous plan was invalidated, if it was.
        reason: Option<String>,
    },
    /// A plan file without metadata: adopt it as a hand-written plan.
    Adopt,
}

/// The resume table (see the module docs).
pub fn decide(info: Option<&PlanInfo>, plan_exists: bool) -> Resume {
    match (info, plan_exists) {
        (None, false) => Resume::Fresh,
        (None, true) => Resume::Adopt,
        (Some(info), exists) => match (info.status, exists) {
            (PlanStatus::Active, true) => Resume::UseActive,
            (PlanStatus::Active, false) => Resume::Replan {
                attempt: info.attempt + 1,
                reason: None,
            },
            (PlanStatus::Invalidated, _) => Resume::Replan {
                attempt: info.attempt + 1,
                reason: info.invalidation_reason.clone(),
            },
        },
    }
}

/// The plan files of one workspace.
#[derive(Clone, Debug)]
pub struct PlanFiles {
    workspace: PathBuf,
    specs_dir: PathBuf,
    root: PathBuf,
}

impl PlanFiles {
    /// Plans of the specs in `specs_dir` (relative to `workspace`), under `<specs_dir>/plans`.
    pub fn new(workspace: impl Into<PathBuf>, specs_dir: impl Into<PathBuf>) -> Self {
        let workspace = workspace.into();
        let specs_dir = specs_dir.into();
        let root = workspace.join(&specs_dir).join("plans");
        PlanFiles {
            workspace,
            specs_dir,
            root,
        }
    }

    /// The folder of the plans (`specs/plans`), absolute.
    #[doc(hidden)] // ralph's own tests look
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<rel>` of a spec given relative to the workspace (`specs/area/x.md` → `area/x`).
    ///
    /// # Errors
    ///
    /// [`Error::SpecPath`] when the path is absolute, has a `..`, does not exist, or is not
    /// inside the specs folder once symlinks are resolved: the rule every mode applies.
    pub fn spec_rel(&self, file: &str) -> Result<String, Error> {
        let inside = spec::inside(&self.workspace, &self.specs_dir, Path::new(file))?;
        Ok(inside.with_extension("").to_string_lossy().into_owned())
    }

    /// `specs/plans/<rel>.md`.
    pub fn plan_path(&self, rel: &str) -> PathBuf {
        self.root.join(format!("{rel}.md"))
    }

    /// `specs/plans/<rel>.json`.
    pub fn meta_path(&self, rel: &str) -> PathBuf {
        self.root.join(format!("{rel}.json"))
    }

    /// `specs/plans/<rel>.attempt-<n>.md`: an invalidated plan.
    pub fn archive_path(&self, rel: &str, attempt: u32) -> PathBuf {
        self.root.join(format!("{rel}.attempt-{attempt}.md"))
    }

    /// The metadata, if there is any.
    ///
    /// # Errors
    ///
    /// [`Error::Io`], or [`Error::Store`] with [`StoreError::MalformedAt`] (the line and column).
    pub fn load_info(&self, rel: &str) -> Result<Option<PlanInfo>, Error> {
        let path = self.meta_path(rel);
        let Some(text) = read_optional(&path)? else {
            return Ok(None);
        };
        serde_json::from_str(&text).map(Some).map_err(|e| {
            Error::Store(StoreError::MalformedAt {
                path,
                line: e.line(),
                column: e.column(),
                message: without_position(&e),
            })
        })
    }

    /// Writes the metadata atomically.
    ///
    /// # Errors
    ///
    /// [`Error::Io`].
    pub fn save_info(&self, info: &PlanInfo) -> Result<(), Error> {
        let mut bytes = serde_json::to_vec_pretty(info).unwrap_or_default();
        bytes.push(b'\n');
        write_atomic(&self.meta_path(&info.spec_rel), &bytes)
    }

    /// The active plan's text, if the file exists.
    ///
    /// # Errors
    ///
    /// [`Error::Io`].
    pub fn load_content(&self, rel: &str) -> Result<Option<String>, Error> {
        read_optional(&self.plan_path(rel))
    }

    /// The plan invalidated as `attempt`, if it was kept.
    ///
    /// # Errors
    ///
    /// [`Error::Io`].
    pub fn archived(&self, rel: &str, attempt: u32) -> Result<Option<String>, Error> {
        read_optional(&self.archive_path(rel, attempt))
    }

    /// What to do about `rel`'s plan now ([`decide`] over the files).
    ///
    /// # Errors
    ///
    /// As [`load_info`](Self::load_info).
    pub fn resume(&self, rel: &str) -> Result<Resume, Error> {
        let info = self.load_info(rel)?;
        Ok(decide(info.as_ref(), self.plan_path(rel).is_file()))
    }

    /// Writes a new active plan: the text first, then the metadata, each atomically (a crash
    /// between the two leaves a plan without metadata, which is adopted on resume).
    ///
    /// # Errors
    ///
    /// [`Error::Io`].
    pub fn write_plan(
        &self,
        rel: &str,
        spec_id: &str,
        text: &str,
        attempt: u32,
    ) -> Result<PlanInfo, Error> {
        let body = text.trim_end().to_owned() + "\n";
        write_atomic(&self.plan_path(rel), body.as_bytes())?;
        let info = PlanInfo::active(rel, spec_id, attempt);
        self.save_info(&info)?;
        Ok(info)
    }

    /// Adopts a hand-written `<rel>.md`: creates its metadata, active, attempt 1.
    ///
    /// # Errors
    ///
    /// [`Error::Io`].
    pub fn adopt(&self, rel: &str, spec_id: &str) -> Result<PlanInfo, Error> {
        let mut info = PlanInfo::active(rel, spec_id, 1);
        info.extra
            .insert("adopted".into(), Value::String("hand-written".into()));
        self.save_info(&info)?;
        Ok(info)
    }

    /// Invalidates the active plan: renames `<rel>.md` to `<rel>.attempt-<n>.md` and marks
    /// the metadata `invalidated` with `reason` and the time. Safe to repeat after a crash
    /// between the two steps.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] or [`Error::Store`].
    pub fn invalidate(&self, rel: &str, reason: &str) -> Result<PlanInfo, Error> {
        let mut info = match self.load_info(rel)? {
            Some(info) => info,
            None => self.adopt(rel, rel.rsplit('/').next().unwrap_or(rel))?,
        };
        let plan = self.plan_path(rel);
        if plan.is_file() {
            let archive = self.archive_path(rel, info.attempt);
            atomic::rename(&plan, &archive).map_err(|source| Error::Io {
                path: plan.clone(),
                source,
            })?;
        }
        info.status = PlanStatus::Invalidated;
        info.invalidated_at_utc = Some(crate::time::now_rfc3339());
        info.invalidation_reason = Some(reason.trim().to_owned());
        self.save_info(&info)?;
        Ok(info)
    }

    /// Keeps a plan a person invalidated by hand: when `<rel>.json` says `invalidated` while
    /// `<rel>.md` is still in place, renames the plan to `<rel>.attempt-N.md` (N the
    /// metadata's attempt), as [`invalidate`](Self::invalidate) does, so the re-planner is
    /// shown it and the new plan does not write over it. Returns where it went. An archive
    /// already there is never written over: it is the invalidated plan, and the `<rel>.md`
    /// beside it a new plan whose metadata a crash cut off.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] or [`Error::Store`].
    pub fn keep_invalidated(&self, rel: &str) -> Result<Option<PathBuf>, Error> {
        let Some(info) = self.load_info(rel)? else {
            return Ok(None);
        };
        let plan = self.plan_path(rel);
        let archive = self.archive_path(rel, info.attempt);
        if info.status != PlanStatus::Invalidated || !plan.is_file() || archive.exists() {
            return Ok(None);
        }
        atomic::rename(&plan, &archive).map_err(|source| Error::Io {
            path: plan.clone(),
            source,
        })?;
        Ok(Some(archive))
    }
}

/// serde_json's message without its trailing " at line L column C" (said once, up front).
fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

fn read_optional(path: &Path) -> Result<Option<String>, Error> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    crate::files::own::create_dir_all(&atomic::dir_of(path)).map_err(io)?;
    atomic::replace(path, bytes).map_err(io)
}

/// The planner's final answer as a plan: its last non-empty line must be `phrase` by the
/// rules of the one marker parser ([`signal::last_line`](crate::signal::last_line): a whole
/// line, surrounding whitespace ignored, never inside a code fence); the plan is everything
/// above it, which must not be empty.
///
/// ```
/// use ralph::specs::plan_files::plan_from_answer;
///
/// let plan = plan_from_answer("# Plan: x\n1. Edit lib.rs\n\nPLAN_COMPLETE\n", "PLAN_COMPLETE");
/// assert_eq!(plan.unwrap(), "# Plan: x\n1. Edit lib.rs");
/// assert!(plan_from_answer("Say PLAN_COMPLETE when done", "PLAN_COMPLETE").is_err());
/// assert!(plan_from_answer("PLAN_COMPLETE\nmore", "PLAN_COMPLETE").is_err());
/// assert!(plan_from_answer("\nPLAN_COMPLETE", "PLAN_COMPLETE").is_err());
/// ```
///
/// # Errors
///
/// A message for the planner's next attempt.
pub fn plan_from_answer(answer: &str, phrase: &str) -> Result<String, String> {
    if crate::signal::last_line(answer) != Some(phrase) {
        return Err(format!(
            "the last non-empty line of the answer was not `{phrase}` on its own"
        ));
    }
    let trimmed = answer.trim_end();
    let body = trimmed.rfind('\n').map_or("", |at| &trimmed[..at]);
    let plan = body.trim();
    if plan.is_empty() {
        return Err("the plan above the final line was empty".into());
    }
    Ok(plan.to_owned())
}

/// Every markdown spec in `specs_dir` (relative to `workspace`), recursively, leaving out
/// the `plans` folder; relative to the workspace, sorted. Then each `.md` left out, with
/// why: a link is taken when it resolves to a file inside the folder (the rule every spec
/// path is held to), and otherwise named, so that a file a person sees is never dropped
/// without a word.
///
/// # Errors
///
/// [`Error::Io`] when a folder cannot be read (a missing `specs_dir` holds no specs).
pub fn find_specs(workspace: &Path, specs_dir: &Path) -> Result<(Vec<String>, Vec<String>), Error> {
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    let mut todo = vec![specs_dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let abs = workspace.join(&dir);
        let entries = match std::fs::read_dir(&abs) {
            Ok(entries) => entries,
            // No specs folder holds no specs: the caller says so, naming the folder.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir == specs_dir => {
                return Ok((Vec::new(), Vec::new()));
            }
            Err(source) => {
                return Err(Error::Io {
                    path: abs.clone(),
                    source,
                });
            }
        };
        for entry in entries.flatten() {
            let rel = dir.join(entry.file_name());
            let kind = entry.file_type().map_err(|source| Error::Io {
                path: entry.path(),
                source,
            })?;
            if kind.is_dir() && !(dir == specs_dir && entry.file_name() == "plans") {
                todo.push(rel);
            } else if kind.is_file() && is_markdown(&rel) {
                found.push(rel.to_string_lossy().into_owned());
            } else if kind.is_symlink() && is_markdown(&rel) {
                match linked_spec(workspace, specs_dir, &rel) {
                    Ok(()) => found.push(rel.to_string_lossy().into_owned()),
                    Err(why) => skipped.push(why),
                }
            }
        }
    }
    found.sort();
    skipped.sort();
    Ok((found, skipped))
}

fn is_markdown(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "md")
}

/// A link `rel` in the specs folder as a spec: it must resolve to a file inside the folder;
/// otherwise why not, naming it and where it leads.
fn linked_spec(workspace: &Path, specs_dir: &Path, rel: &Path) -> Result<(), String> {
    crate::runtime::spec::inside(workspace, specs_dir, rel).map_err(|e| match e {
        Error::SpecPath { path, reason } => format!("{path}: {reason}"),
        other => format!("{}: {other}", rel.display()),
    })?;
    match workspace.join(rel).is_file() {
        true => Ok(()),
        false => Err(format!("{}: links to a folder, not a file", rel.display())),
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    use super::*;

    fn info(status: PlanStatus, attempt: u32, reason: Option<&str>) -> PlanInfo {
        PlanInfo {
            spec_rel: "x".into(),
            spec_id: "x".into(),
            status,
            created_at_utc: "2026-01-01T00:00:00Z".into(),
            invalidated_at_utc: None,
            invalidation_reason: reason.map(str::to_owned),
            attempt,
            extra: Map::new(),
        }
    }

    /// The resume table, row by row.
    #[test]
    fn resume_table() {
        let active = info(PlanStatus::Active, 1, None);
        let invalid = info(PlanStatus::Invalidated, 2, Some("wrong approach"));
        let replan = |attempt, reason: Option<&str>| Resume::Replan {
            attempt,
            reason: reason.map(str::to_owned),
        };
        let cases = [
            (None, false, Resume::Fresh),
            (Some(&active), true, Resume::UseActive),
            (Some(&invalid), false, replan(3, Some("wrong approach"))),
            (Some(&invalid), true, replan(3, Some("wrong approach"))),
            (None, true, Resume::Adopt),
            (Some(&active), false, replan(2, None)),
        ];
        for (info, exists, want) in cases {
            assert_eq!(decide(info, exists), want, "{info:?} md={exists}");
        }
    }

    /// A plan invalidated by hand is moved to its archive once; an archive already there
    /// (the invalidated plan, beside a new plan whose metadata a crash cut off) is kept.
    #[test]
    fn a_plan_invalidated_by_hand_is_kept_and_an_archive_never_written_over() {
        let ws = tempfile::tempdir().unwrap();
        let plans = PlanFiles::new(ws.path(), "specs");
        let mut info = plans.write_plan("x", "x", "old plan", 1).unwrap();
        assert_eq!(plans.keep_invalidated("x").unwrap(), None, "active");
        info.status = PlanStatus::Invalidated;
        plans.save_info(&info).unwrap();
        let kept = plans.keep_invalidated("x").unwrap();
        assert_eq!(kept, Some(plans.archive_path("x", 1)));
        assert_eq!(
            plans.archived("x", 1).unwrap().as_deref(),
            Some("old plan\n")
        );
        assert!(!plans.plan_path("x").exists());

        std::fs::write(plans.plan_path("x"), "a new plan\n").unwrap();
        assert_eq!(plans.keep_invalidated("x").unwrap(), None);
        assert_eq!(
            plans.archived("x", 1).unwrap().as_deref(),
            Some("old plan\n")
        );
    }

    #[test]
    fn spec_paths_that_escape_are_refused() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(ws.path().join("specs")).unwrap();
        std::fs::write(ws.path().join("outside.md"), "x").unwrap();
        std::fs::write(ws.path().join("specs/ok.md"), "x").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(
            ws.path().join("outside.md"),
            ws.path().join("specs/link.md"),
        )
        .unwrap();
        let plans = PlanFiles::new(ws.path(), "specs");
        assert_eq!(plans.spec_rel("specs/ok.md").unwrap(), "ok");
        for (file, why) in [
            ("specs/../outside.md", "`..`"),
            ("/etc/passwd", "absolute"),
            ("outside.md", "outside the folder specs"),
            ("specs/missing.md", "cannot be read"),
            #[cfg(unix)]
            ("specs/link.md", "outside the folder specs"),
        ] {
            let e = plans.spec_rel(file).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(file), "{file}: {e}");
        }
    }

    #[test]
    fn malformed_metadata_names_file_line_and_column() {
        let ws = tempfile::tempdir().unwrap();
        let plans = PlanFiles::new(ws.path(), "specs");
        std::fs::create_dir_all(plans.root()).unwrap();
        std::fs::write(plans.meta_path("x"), "{\n  \"status\": \"maybe\"\n}").unwrap();
        let e = plans.load_info("x").unwrap_err().to_string();
        assert!(e.contains("x.json:2:"), "{e}");
        assert!(e.contains("maybe"), "{e}");
        assert!(!e.contains(" at line "), "the position is said once: {e}");
    }
}
