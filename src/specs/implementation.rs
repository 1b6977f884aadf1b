//! `implementation.json` (seed 004): the specs, their tasks and acceptance criteria, as plan
//! mode extracted them from the markdown specs, and their progress as build mode records it.
//!
//! ```json
//! {
//!   "version": 1,
//!   "updatedAt": "2026-01-17T10:30:00Z",
//!   "updatedBy": "plan-mode",
//!   "specs": [{
//!     "id": "user-avatar-upload",
//!     "file": "specs/user-avatar-upload.md",
//!     "name": "User Avatar Upload",
//!     "priority": 1,
//!     "status": "in_progress",
//!     "context": "Allow users to upload avatars.",
//!     "tasks": [
//!       {"id": "user-avatar-upload-1", "description": "Add avatarUrl to User", "status": "completed"},
//!       {"id": "user-avatar-upload-2", "description": "Create the upload endpoint", "status": "pending",
//!        "acceptanceCriteria": ["Users can upload JPG/PNG up to 5MB"]}
//!     ],
//!     "acceptanceCriteria": ["Users can upload JPG/PNG up to 5MB"]
//!   }]
//! }
//! ```
//!
//! The file may be written by hand: every field but a spec's `id` and `file` and a task's
//! `id` and `description` has a default, and fields ralph does not know are kept, in place,
//! when ralph writes the file back. ralph's own bookkeeping (`attempts`, `lastFailure`,
//! `commit`…) is left out while it is empty. Writes are atomic (temp file, fsync, rename).
//!
//! ```
//! use ralph::specs::implementation::ImplementationStore;
//! use ralph::specs::Status;
//!
//! let dir = tempfile::tempdir()?;
//! std::fs::write(dir.path().join("implementation.json"), r#"{"specs": [{
//!     "id": "greeter", "file": "specs/greeter.md", "owner": "ada",
//!     "tasks": [{"id": "greeter-1", "description": "Write greet.sh"}]
//! }]}"#)?;
//! let store = ImplementationStore::new(dir.path().join("implementation.json"));
//! let mut plan = store.load()?.expect("the file exists");
//! assert_eq!(plan.specs[0].tasks[0].status, Status::Pending);
//! plan.specs[0].tasks[0].status = Status::Completed;
//! store.save(&mut plan, "build-mode")?;
//! let text = std::fs::read_to_string(dir.path().join("implementation.json"))?;
//! assert!(text.contains(r#""owner": "ada""#) && text.contains(r#""status": "completed""#));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::files::watch::Watch;
use crate::store::StoreError;

/// The format version ralph writes.
pub(crate) const VERSION: u32 = 1;

/// The status of a spec or a task.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Status {
    /// Not started.
    #[default]
    Pending,
    /// Being worked on.
    InProgress,
    /// Done: for a task, its required gates passed; for a spec, verified and committed.
    Completed,
    /// Cannot proceed without a person (the reason is recorded beside it).
    Blocked,
}

/// The whole file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Implementation {
    /// The format version. Default 1.
    #[serde(default = "version")]
    pub version: u32,
    /// RFC 3339 time of the last write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    /// Who wrote it last (`plan-mode`, `build-mode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
    /// The specs, in the order of the file (build mode orders them by priority).
    #[serde(default)]
    pub specs: Vec<SpecEntry>,
    /// Fields ralph does not know, kept as they were.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn version() -> u32 {
    VERSION
}

impl Default for Implementation {
    fn default() -> Self {
        Implementation {
            version: VERSION,
            updated_at: None,
            updated_by: None,
            specs: Vec::new(),
            extra: Map::new(),
        }
    }
}

impl Implementation {
    /// The spec with this id.
    pub fn spec(&self, id: &str) -> Option<&SpecEntry> {
        self.specs.iter().find(|s| s.id == id)
    }

    /// The spec with this id, mutably.
    pub fn spec_mut(&mut self, id: &str) -> Option<&mut SpecEntry> {
        self.specs.iter_mut().find(|s| s.id == id)
    }

    /// The index of the spec a person names: by its id, else by its `file` (as written in
    /// the file, or with a leading `./`).
    pub(crate) fn named(&self, name: &str) -> Option<usize> {
        let file = name.strip_prefix("./").unwrap_or(name);
        self.specs
            .iter()
            .position(|s| s.id == name)
            .or_else(|| self.specs.iter().position(|s| s.file == file))
    }

    /// The first spec of [`build_order`](Self::build_order) that is not in `held` and
    /// whose `dependsOn` specs are all completed.
    pub fn next_ready(&self, held: &[String]) -> Option<usize> {
        let completed = |id: &String| self.spec(id).is_some_and(|s| s.status == Status::Completed);
        self.build_order().into_iter().find(|&i| {
            let spec = &self.specs[i];
            !held.contains(&spec.id) && spec.depends_on.iter().all(completed)
        })
    }

    /// Indexes of the specs build mode still has to do (not completed), by priority (lower
    /// first), ties in file order.
    pub fn build_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.specs.len())
            .filter(|&i| self.specs[i].status != Status::Completed)
            .collect();
        order.sort_by_key(|&i| (self.specs[i].priority, i));
        order
    }
}

/// One spec: a markdown file and the tasks plan mode extracted from it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SpecEntry {
    /// A stable id (`user-avatar-upload`); task ids are `<id>-<n>`.
    pub id: String,
    /// The markdown spec, relative to the workspace (`specs/user-avatar-upload.md`).
    pub file: String,
    /// A human name; the commit message of the spec. Default: the id.
    #[serde(default)]
    pub name: String,
    /// Lower is built first. Default 0.
    #[serde(default)]
    pub priority: i64,
    /// The spec's status.
    #[serde(default)]
    pub status: Status,
    /// What an implementer of any of its tasks should know.
    #[serde(default)]
    pub context: String,
    /// The tasks, in build order.
    #[serde(default)]
    pub tasks: Vec<TaskEntry>,
    /// The spec's acceptance criteria, checked by the verifier.
    #[serde(default)]
    pub acceptance_criteria: Vec<String>,
    /// Specs (by id) that must be completed before this one is built. A spec that is
    /// blocked or out of attempts holds back only the specs that depend on it, directly or
    /// through others; build mode goes on with the rest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// Failed rounds counted against `[planning] max_attempts` (planner failures,
    /// verifier rejections).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts: u32,
    /// Verifier runs so far.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub verifications: u32,
    /// The last failed round's reason (first line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
    /// Why the spec is blocked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_reason: Option<String>,
    /// Set when the verifier accepted the spec, before its commit: a restart then commits
    /// (or records the commit already made) instead of asking the verifier again.
    #[serde(default, skip_serializing_if = "is_false")]
    pub verified: bool,
    /// Why the last verification of the spec gave no verdict (it failed, was killed, or
    /// answered invalidly, also when asked once more): the spec is unverified, and the next
    /// run asks again. `None` once a verdict came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unverified: Option<String>,
    /// A plan invalidation recorded (with its rework task) but not yet applied to the plan
    /// files: the reason. Build mode applies it before planning, also after a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_invalidation: Option<String>,
    /// The commit that completed the spec, as earlier versions recorded it (or a person
    /// does). ralph no longer writes it: the spec's commit holds this file with the spec
    /// completed, and a commit cannot name itself. It is the commit that set `completedAt`
    /// (`git log -1 --format=%H -S '"completedAt"' -- implementation.json`, or the
    /// `spec_committed` event).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// RFC 3339 time the spec was completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// Fields ralph does not know, kept as they were.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl SpecEntry {
    /// A pending spec with no tasks; its name is its id.
    pub fn new(id: impl Into<String>, file: impl Into<String>) -> Self {
        let id = id.into();
        SpecEntry {
            name: id.clone(),
            id,
            file: file.into(),
            priority: 0,
            status: Status::Pending,
            context: String::new(),
            tasks: Vec::new(),
            acceptance_criteria: Vec::new(),
            depends_on: Vec::new(),
            attempts: 0,
            verifications: 0,
            last_failure: None,
            blocked_reason: None,
            verified: false,
            unverified: None,
            plan_invalidation: None,
            commit: None,
            completed_at: None,
            extra: Map::new(),
        }
    }

    /// The name, or the id when it has none.
    pub fn display_name(&self) -> &str {
        if self.name.trim().is_empty() {
            &self.id
        } else {
            &self.name
        }
    }

    /// The next free task id, `<id>-<n>` with `n` above every number in use.
    pub fn next_task_id(&self) -> String {
        let prefix = format!("{}-", self.id);
        let highest = self
            .tasks
            .iter()
            .filter_map(|t| t.id.strip_prefix(&prefix)?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        format!("{prefix}{}", highest + 1)
    }

    /// Index of the first task still to do (pending or in progress), in file order.
    pub fn next_task(&self) -> Option<usize> {
        self.tasks
            .iter()
            .position(|t| matches!(t.status, Status::Pending | Status::InProgress))
    }

    /// Seed 002's "unless forced": the spec and every task of it back to pending, with what
    /// an earlier build recorded (attempts, failures, verdicts, completion) cleared, so build
    /// mode builds it again from its first task. Its text, tasks, criteria and unknown fields
    /// stay; so does its plan (in `.ralph/plans/`), as the seed keeps an active plan.
    pub(crate) fn reset_for_rebuild(&mut self) {
        self.status = Status::Pending;
        self.attempts = 0;
        self.verifications = 0;
        self.last_failure = None;
        self.blocked_reason = None;
        self.verified = false;
        self.unverified = None;
        self.commit = None;
        self.completed_at = None;
        for task in &mut self.tasks {
            task.status = Status::Pending;
            task.attempts = 0;
            task.last_failure = None;
            task.blocked_reason = None;
            task.completed_at = None;
        }
    }
}

/// One task of a spec: one agent session's worth of work.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TaskEntry {
    /// `<spec-id>-<n>`.
    pub id: String,
    /// What to do.
    pub description: String,
    /// The task's status.
    #[serde(default)]
    pub status: Status,
    /// How a verifier can tell it is done.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acceptance_criteria: Vec<String>,
    /// Agent sessions run for this task so far.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts: u32,
    /// The previous attempt's failure (gate output, verifier feedback), bounded; the next
    /// session's prompt carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
    /// Why the task is blocked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_reason: Option<String>,
    /// The question its agent asked a person (`<TASK_QUESTION question="…">`): the task,
    /// and so its spec, waits for the answer (`ralph answer <task id> "…"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// Sessions that ended with a question: counted in `attempts` (each session has its own
    /// number), not against the retries.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub asked: u32,
    /// RFC 3339 time the task was completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// Fields ralph does not know, kept as they were.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl TaskEntry {
    /// A pending task.
    pub fn new(id: impl Into<String>, description: impl Into<String>) -> Self {
        TaskEntry {
            id: id.into(),
            description: description.into(),
            status: Status::Pending,
            acceptance_criteria: Vec::new(),
            attempts: 0,
            last_failure: None,
            blocked_reason: None,
            question: None,
            asked: 0,
            completed_at: None,
            extra: Map::new(),
        }
    }

    /// Sessions counted against the retries: those that did not end with a question.
    pub(crate) fn tries(&self) -> u32 {
        self.attempts.saturating_sub(self.asked)
    }

    /// Sets the acceptance criteria.
    #[must_use]
    pub fn with_criteria(mut self, criteria: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.acceptance_criteria = criteria.into_iter().map(Into::into).collect();
        self
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Reads and writes one `implementation.json`.
///
/// A store that read the file refuses to write over it when, since, it was deleted,
/// replaced or rewritten by someone else ([`StoreError::Changed`]): a person's edit made
/// while a run goes on is not silently overwritten, and a file deleted under a run does not
/// come back holding only what the run knew.
#[derive(Clone, Debug)]
pub struct ImplementationStore {
    path: PathBuf,
    watch: Arc<Watch>,
    /// Where a changed file found during a run is kept; beside the file by default.
    copies: Option<PathBuf>,
}

impl ImplementationStore {
    /// The store of the file at `path` (which need not exist yet).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        ImplementationStore {
            path: path.into(),
            watch: Arc::default(),
            copies: None,
        }
    }

    /// Keeps a changed file found during a run in `dir` (ralph's state folder, out of the
    /// user's `git status`) instead of beside the file.
    #[must_use]
    pub(crate) fn copies_in(mut self, dir: impl Into<PathBuf>) -> Self {
        self.copies = Some(dir.into());
        self
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file; `None` when there is none.
    ///
    /// # Errors
    ///
    /// [`StoreError::Io`] when it cannot be read; [`StoreError::MalformedAt`] naming the file,
    /// the line and the column (`path:line:column: …`) when it is not valid JSON or not an
    /// implementation (a task without an id, an unknown status…), or when two specs or two
    /// tasks share an id (then the position is the second one's `id` value).
    pub fn load(&self) -> Result<Option<Implementation>, StoreError> {
        let io = |source| StoreError::Io {
            path: self.path.clone(),
            source,
        };
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.watch.saw(&self.path).map_err(io)?;
                return Ok(None);
            }
            Err(source) => return Err(io(source)),
        };
        self.watch.saw(&self.path).map_err(io)?;
        let plan: Implementation =
            serde_json::from_str(&text).map_err(|e| StoreError::MalformedAt {
                path: self.path.clone(),
                line: e.line(),
                column: e.column(),
                message: strip_position(&e),
            })?;
        check_ids(&plan).map_err(|dup| {
            // serde keeps no positions: the repeated id is found again in the text.
            let (line, column) = super::json_locate::find(&text, &dup.path)
                .map(|offset| super::json_locate::line_column(&text, offset))
                .unwrap_or((1, 1));
            StoreError::MalformedAt {
                path: self.path.clone(),
                line,
                column,
                message: dup.message,
            }
        })?;
        Ok(Some(plan))
    }

    /// Writes `plan` atomically and durably, stamping `updatedAt` and `updatedBy`.
    ///
    /// The file is people's to edit between runs; while a run uses it, it is ralph's. A
    /// change made meanwhile (by an agent, most likely: an agent that marks a task completed
    /// must not have it taken as done) is kept as `implementation.json.changed-<time>` (in
    /// ralph's state folder during a run of build mode), the
    /// file is put back as ralph would write it, and the run stops with
    /// [`StoreError::Restored`]: the next run goes on from what ralph recorded.
    ///
    /// # Errors
    ///
    /// [`StoreError::Io`] when the file or its folder cannot be written;
    /// [`StoreError::Restored`] when the file changed since this store read or wrote it;
    /// [`StoreError::Changed`] when it was deleted (it is not written again).
    pub fn save(&self, plan: &mut Implementation, by: &str) -> Result<(), StoreError> {
        let io = |source| StoreError::Io {
            path: self.path.clone(),
            source,
        };
        let Some(how) = self.watch.change(&self.path).map_err(io)? else {
            return self.write(plan, by);
        };
        let kept_as = match (&self.copies, self.path.file_name()) {
            (Some(dir), Some(name)) => dir.join(name),
            _ => self.path.clone(),
        };
        let changed = match std::fs::read(&self.path) {
            Ok(changed) => changed,
            // Deleted: not written again (a person may have removed it to start over); the
            // run stops without it, and plan mode makes a new one.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::Changed {
                    path: self.path.clone(),
                    how,
                });
            }
            Err(source) => return Err(io(source)),
        };
        let copy = crate::files::atomic::keep_copy(&kept_as, "changed", &changed)
            .map_err(|(path, source)| StoreError::Io { path, source })?;
        self.write(plan, by)?;
        Err(StoreError::Restored {
            path: self.path.clone(),
            how,
            copy: Some(copy),
        })
    }

    /// Writes `plan` over whatever the file holds now: after ralph itself changed it (putting
    /// back the branch an agent switched away from checks out the branch's copy of it).
    ///
    /// # Errors
    ///
    /// [`StoreError::Io`] when the file or its folder cannot be written.
    pub(crate) fn restore(&self, plan: &mut Implementation, by: &str) -> Result<(), StoreError> {
        self.write(plan, by)
    }

    fn write(&self, plan: &mut Implementation, by: &str) -> Result<(), StoreError> {
        plan.updated_at = Some(crate::time::now_rfc3339());
        plan.updated_by = Some(by.to_owned());
        let io = |source| StoreError::Io {
            path: self.path.clone(),
            source,
        };
        let mut bytes = serde_json::to_vec_pretty(plan)
            .map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
        bytes.push(b'\n');
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::files::own::create_dir_all(dir).map_err(io)?;
        }
        crate::files::atomic::replace(&self.path, &bytes).map_err(io)?;
        self.watch.saw(&self.path).map_err(io)
    }
}

/// serde_json's message without its trailing " at line L column C" (said once, up front).
fn strip_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

/// A repeated or empty id: what is wrong, and where (the JSON path of the `id` value).
struct BadId {
    message: String,
    path: Vec<super::json_locate::PathStep>,
}

/// Ids are what build mode and the fake scripts key on: they must be unique and non-empty.
fn check_ids(plan: &Implementation) -> Result<(), BadId> {
    use super::json_locate::PathStep;
    let spec_path = |i| {
        vec![
            PathStep::Key("specs"),
            PathStep::Index(i),
            PathStep::Key("id"),
        ]
    };
    let task_path = |i, j| {
        vec![
            PathStep::Key("specs"),
            PathStep::Index(i),
            PathStep::Key("tasks"),
            PathStep::Index(j),
            PathStep::Key("id"),
        ]
    };
    let bad = |message: String, path| Err(BadId { message, path });
    let mut specs = std::collections::HashSet::new();
    let mut tasks = std::collections::HashSet::new();
    for (i, spec) in plan.specs.iter().enumerate() {
        if spec.id.trim().is_empty() {
            return bad(format!("specs[{i}].id is empty"), spec_path(i));
        }
        if !specs.insert(spec.id.as_str()) {
            let message = format!("specs[{i}].id repeats the spec id {:?}", spec.id);
            return bad(message, spec_path(i));
        }
        for (j, task) in spec.tasks.iter().enumerate() {
            if task.id.trim().is_empty() {
                return bad(
                    format!("specs[{i}].tasks[{j}].id is empty"),
                    task_path(i, j),
                );
            }
            if !tasks.insert(task.id.as_str()) {
                let message = format!("specs[{i}].tasks[{j}].id repeats the task id {:?}", task.id);
                return bad(message, task_path(i, j));
            }
        }
    }
    check_depends_on(plan)
}

/// `dependsOn` names other specs of the file, and never leads back to the spec itself.
fn check_depends_on(plan: &Implementation) -> Result<(), BadId> {
    use super::json_locate::PathStep;
    for (i, spec) in plan.specs.iter().enumerate() {
        for (k, dep) in spec.depends_on.iter().enumerate() {
            let path = vec![
                PathStep::Key("specs"),
                PathStep::Index(i),
                PathStep::Key("dependsOn"),
                PathStep::Index(k),
            ];
            let message = if plan.spec(dep).is_none() {
                format!("specs[{i}].dependsOn[{k}] names no spec: {dep:?}")
            } else if leads_back(plan, dep, &spec.id) {
                format!(
                    "specs[{i}].dependsOn[{k}] ({dep:?}) depends on {:?} in turn",
                    spec.id
                )
            } else {
                continue;
            };
            return Err(BadId { message, path });
        }
    }
    Ok(())
}

/// Whether `from` depends on `target`, directly or through other specs.
fn leads_back(plan: &Implementation, from: &str, target: &str) -> bool {
    let mut seen = std::collections::HashSet::new();
    let mut todo = vec![from];
    while let Some(id) = todo.pop() {
        if id == target {
            return true;
        }
        if seen.insert(id) {
            todo.extend(
                plan.spec(id)
                    .iter()
                    .flat_map(|s| s.depends_on.iter().map(String::as_str)),
            );
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_task_id_is_above_every_number_in_use() {
        let mut spec = SpecEntry::new("a", "specs/a.md");
        assert_eq!(spec.next_task_id(), "a-1");
        spec.tasks.push(TaskEntry::new("a-7", "x"));
        spec.tasks.push(TaskEntry::new("custom", "y"));
        assert_eq!(spec.next_task_id(), "a-8");
    }

    #[test]
    fn the_next_ready_spec_waits_for_its_dependencies_and_skips_the_held() {
        let mut plan = Implementation::default();
        for (id, deps) in [("a", &[][..]), ("b", &["a"][..]), ("c", &[][..])] {
            let mut spec = SpecEntry::new(id, format!("specs/{id}.md"));
            spec.depends_on = deps.iter().map(|d| (*d).to_owned()).collect();
            plan.specs.push(spec);
        }
        assert_eq!(plan.next_ready(&[]), Some(0));
        assert_eq!(plan.next_ready(&["a".into()]), Some(2), "b waits for a");
        plan.specs[0].status = Status::Completed;
        assert_eq!(plan.next_ready(&[]), Some(1));
    }

    #[test]
    fn depends_on_must_name_a_spec_and_never_lead_back() {
        let mut plan = Implementation::default();
        let mut a = SpecEntry::new("a", "specs/a.md");
        a.depends_on = vec!["zz".into()];
        plan.specs.push(a);
        let err = check_ids(&plan).err().unwrap();
        assert_eq!(err.message, "specs[0].dependsOn[0] names no spec: \"zz\"");

        let mut b = SpecEntry::new("b", "specs/b.md");
        b.depends_on = vec!["a".into()];
        plan.specs.push(b);
        plan.specs[0].depends_on = vec!["b".into()];
        let err = check_ids(&plan).err().unwrap();
        assert!(
            err.message.contains("depends on \"a\" in turn"),
            "{}",
            err.message
        );
    }

    #[test]
    fn build_order_is_by_priority_then_file_order_without_completed() {
        let mut plan = Implementation::default();
        for (id, priority, status) in [
            ("a", 2, Status::Pending),
            ("b", 1, Status::Completed),
            ("c", 1, Status::Pending),
            ("d", 2, Status::InProgress),
        ] {
            let mut s = SpecEntry::new(id, format!("specs/{id}.md"));
            s.priority = priority;
            s.status = status;
            plan.specs.push(s);
        }
        assert_eq!(plan.build_order(), [2, 0, 3]);
    }
}
