//! `ProgressStore`: the board as seed 003's markdown progress file, which people read and edit

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{Store, StoreError};
use crate::files::atomic;
use crate::files::seen::{self, Seen};
use crate::model::{AcceptedBy, Board, Change, Issue, RunState, Task, TaskId, TaskStatus};
use crate::signal::{FenceTracker, is_marker_line};

/// The marker that, alone on a line of the Status section, declares the work complete.
pub(super) const RALPH_DONE: &str = "RALPH_DONE";

/// `ProgressStore`: the board as seed 003's markdown progress file, which people read and edit
/// while ralph runs.
///
/// # Format
///
/// ```markdown
/// # Progress: Greeter
///
/// ## Status
///
/// In progress
///
/// ## Phase 1: Setup
///
/// - [x] Create the project <!-- id:t-1 -->
/// - [ ] Write hello.txt <!-- id:t-2 -->
///
/// ## Recent Attempts
///
/// - Iteration 1, t-2: tried: Wrote the file. — result: gates failed: test
///
/// ## Iteration Log
///
/// | Iteration | Started | Duration | Tasks Completed | Notes |
/// |---|---|---|---|---|
/// | 1 | 2026-01-18T10:00:00Z | 4m 2s | 1 | 1 accepted, 0 rejected, 0 new task(s), 0 new issue(s) |
/// ```
///
/// A file ralph starts itself has this layout, titled with the spec's title (its first
/// `# ` heading) and one `## Tasks` section in place of the phases; a file an earlier ralph
/// wrote, with an empty `## Tasks` section and the boxes in a second one at the end, takes
/// it at its next write.
///
/// Sections start at `#` and `##` headings (outside fenced code). Who owns what:
///
/// * **Status** (`## Status`) belongs to people; ralph keeps it as written. `RALPH_DONE` on
///   a line of its own in it (outside fenced code) stops the loop before the next agent
///   run. It is a stop, not a verdict: with work left the run ends with
///   [`Outcome::Declared`](crate::Outcome::Declared) (exit code 2) and the remaining count,
///   never [`Outcome::Complete`](crate::Outcome::Complete), since done is decided by the
///   gates and the verifier. `RALPH_DONE` anywhere else (in a task's text, in Recent
///   Attempts, in a sentence) counts for nothing. The file lives in the workspace, so an
///   agent could write it too (the build prompt never asks it to); at worst that stops the
///   loop early, and the outcome says how much is left.
/// * **Task lines** are `- [ ] name` / `- [x] name` (also `*` or `+` bullets, any indent) in
///   any other section (`## Phase N: …`, `### …` below it, a preamble). ralph rewrites them
///   with the task's current name and box and an id trailer `<!-- id:t-3 -->`, and keeps
///   every other line of these sections (prose, notes, sub-headings) as written.
/// * **Recent Attempts** and **Iteration Log** belong to ralph: regenerated at each write
///   from the run state (the last `recent_attempts` attempts; the last
///   [`ITERATION_LOG_LIMIT`](crate::model::ITERATION_LOG_LIMIT) iterations).
///
/// # Task ids
///
/// A task line's id is its `<!-- id:… -->` trailer. A line without one (a hand-written file,
/// or a task a person added) gets the next free `t-<n>` in document order — on a fresh file
/// that is its position (`t-1`, `t-2`, …) — and ralph writes the trailer at its next write,
/// so the id stays with the line however lines move afterwards. Two lines with one id are
/// an error.
///
/// # What the markdown cannot hold
///
/// Attempt counts, tombstones, done-awaiting-verify, verdicts, issues, run counters, the
/// recent attempts and the iteration log live in a sidecar JSON file next to it
/// (`.ralph/<stem>-state.json`, e.g. `.ralph/progress-state.json`). Loading reconciles the two:
///
/// * `[x]` → accepted (a person ticking a box by hand is honored); `[ ]` → what the sidecar
///   says (pending, done, blocked), or pending for a line it does not know (a task a person
///   added). A task accepted in the sidecar whose box a person unticked is pending again (a
///   decomposed task, shown ticked, stays decomposed).
/// * A task in the sidecar but no longer in the file was deleted by a person: it is gone, and
///   tasks that depended on it no longer wait for it.
/// * The task's name is the line's text: a person may reword it.
///
/// # Durability
///
/// Each [`persist`](Store::persist) re-reads both files (so edits made since the last
/// load are kept), applies the changes, and replaces the markdown and then the sidecar, each
/// atomically (temp file, fsync, rename). The sidecar records a hash of the markdown it goes
/// with, which tells a person's edit from a crash between the two writes. The store holds
/// an exclusive lock on `<sidecar>.lock` for its lifetime.
///
/// The engine re-reads the file at the start of every stage. An edit to a task the engine is
/// working on in that very stage can be overwritten by the engine's next write of that task
/// (a tick on a task being built, a deleted line of a task being built); edits to other
/// tasks and to prose are kept.
///
/// Malformed input — a file that is not UTF-8, a checkbox line that cannot be read
/// (`- [~] x`, `- [ ]` with no text, a broken trailer), a duplicated id, a sidecar that is not
/// valid JSON — is a [`StoreError::Malformed`] naming the file and line.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// use ralph::{ProgressStore, Store};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("PROGRESS.md");
/// std::fs::write(&path, "# Progress: Demo\n\n## Status\n\nIn progress\n\n\
///     ## Phase 1: Setup\n\n- [x] Create the project\n- [ ] Write hello.txt\n")?;
///
/// let store = ProgressStore::open(&path)?;
/// let board = store.load().await?;
/// assert_eq!(board.task("t-2").unwrap().name, "Write hello.txt");
/// assert!(!board.task("t-2").unwrap().is_finished());
/// assert!(board.task("t-1").unwrap().is_finished());
///
/// // Any write gives every line its id trailer, keeping the rest as written.
/// store.persist(&[]).await?;
/// let text = std::fs::read_to_string(&path)?;
/// assert!(text.contains("- [ ] Write hello.txt <!-- id:t-2 -->"));
/// assert!(text.contains("## Status\n\nIn progress\n"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ProgressStore {
    shared: Arc<ProgressShared>,
}

struct ProgressShared {
    path: PathBuf,
    sidecar: PathBuf,
    /// Serializes this process's read-modify-write cycles, and holds the sidecar as this
    /// store last wrote it (`None` before its first write): the sidecar is ralph's alone, so
    /// one deleted or replaced under a running store is lost state, refused at the next
    /// write. (The markdown is the person's too: their edits are reconciled, and a deleted
    /// one is written again.)
    writing: Mutex<Option<Seen>>,
}

impl ProgressStore {
    /// The store for the progress file `path` (which need not exist yet), with its sidecar
    /// at `.ralph/<stem>-state.json` beside it. Writes nothing: the first persist creates
    /// the files and their directories.
    ///
    /// # Errors
    ///
    /// None today; the `Result` leaves room for stores that must check their path.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().to_lowercase())
            .unwrap_or_else(|| "progress".into());
        let sidecar = atomic::dir_of(&path)
            .join(".ralph")
            .join(format!("{stem}-state.json"));
        Self::open_with_sidecar(path, sidecar)
    }

    /// As [`open`](Self::open), with the sidecar at `sidecar`.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open).
    pub fn open_with_sidecar(
        path: impl Into<PathBuf>,
        sidecar: impl Into<PathBuf>,
    ) -> Result<Self, StoreError> {
        let (path, sidecar) = (path.into(), sidecar.into());
        let seen = Seen::at(&sidecar).map_err(|e| io_error(&sidecar, e))?;
        Ok(ProgressStore {
            shared: Arc::new(ProgressShared {
                path,
                sidecar,
                writing: Mutex::new(seen),
            }),
        })
    }

    /// The markdown progress file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// The JSON sidecar.
    pub fn sidecar_path(&self) -> &Path {
        &self.shared.sidecar
    }

    async fn blocking<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&ProgressShared) -> Result<T, StoreError> + Send + 'static,
    {
        super::file_io(&self.shared.path, &self.shared, f).await
    }
}

impl fmt::Debug for ProgressStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProgressStore")
            .field("path", &self.shared.path)
            .field("sidecar", &self.shared.sidecar)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Store for ProgressStore {
    async fn load(&self) -> Result<Board, StoreError> {
        self.blocking(|shared| Ok(shared.read()?.1)).await
    }

    async fn persist(&self, changes: &[Change]) -> Result<(), StoreError> {
        let changes = changes.to_vec();
        self.blocking(move |shared| shared.persist(changes)).await
    }

    fn edited_externally(&self) -> bool {
        true
    }

    fn location(&self) -> Option<String> {
        Some(self.path().display().to_string())
    }
}

impl ProgressShared {
    /// Reads and reconciles both files. Writes nothing.
    fn read(&self) -> Result<(Option<Doc>, Board), StoreError> {
        let sidecar = Sidecar::read(&self.sidecar)?;
        let text = match std::fs::read(&self.path) {
            Ok(bytes) => Some(utf8(&self.path, bytes)?),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_error(&self.path, e)),
        };
        let Some(text) = text else {
            return Ok((None, sidecar.unwrap_or_default().into_board()));
        };
        let mut doc = Doc::parse(&text, &self.path)?;
        doc.fold_old_layout();
        let hand_edited = sidecar
            .as_ref()
            .is_none_or(|s| s.written.as_deref() != Some(&fingerprint(&text)));
        let board = doc.reconcile(sidecar.unwrap_or_default(), hand_edited);
        Ok((Some(doc), board))
    }

    fn persist(&self, changes: Vec<Change>) -> Result<(), StoreError> {
        let mut seen = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let now = Seen::at(&self.sidecar).map_err(|e| io_error(&self.sidecar, e))?;
        if let Some(how) = seen::change(*seen, now) {
            return Err(StoreError::Changed {
                path: self.sidecar.clone(),
                how,
            });
        }
        if seen.is_none() {
            // The first write: the directories may not exist yet, and a crashed writer's
            // temp files may (the runtime's workspace lock makes this the only writer).
            for dir in [atomic::dir_of(&self.path), atomic::dir_of(&self.sidecar)] {
                crate::files::own::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
            }
            atomic::remove_stale_temps(&self.path);
            atomic::remove_stale_temps(&self.sidecar);
        }
        let (doc, mut board) = self.read()?;
        let counters = (board.run.next_task, board.run.next_issue);
        board.apply_all(changes);
        // The engine's run state may predate ids given to lines a person added since.
        board.run.next_task = board.run.next_task.max(counters.0);
        board.run.next_issue = board.run.next_issue.max(counters.1);
        let text = render(doc.as_ref(), &board);
        // Markdown first: a crash before the sidecar leaves ticks the reconciliation honors.
        atomic::replace(&self.path, text.as_bytes()).map_err(|e| io_error(&self.path, e))?;
        let sidecar = Sidecar::of(&board, fingerprint(&text));
        let json = serde_json::to_vec_pretty(&sidecar).map_err(|source| StoreError::Encode {
            path: self.sidecar.clone(),
            source,
        })?;
        atomic::replace(&self.sidecar, &json).map_err(|e| io_error(&self.sidecar, e))?;
        *seen = Seen::at(&self.sidecar).map_err(|e| io_error(&self.sidecar, e))?;
        Ok(())
    }
}

/// What the markdown cannot hold.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Sidecar {
    /// Format version.
    #[serde(default)]
    version: u32,
    /// The fingerprint of the markdown ralph wrote with this sidecar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    written: Option<String>,
    #[serde(default)]
    run: RunState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    config: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    issues: Vec<Issue>,
    #[serde(default)]
    tasks: Vec<Task>,
}

impl Sidecar {
    fn read(path: &Path) -> Result<Option<Sidecar>, StoreError> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(path, e)),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StoreError::Malformed {
                path: path.to_path_buf(),
                line: e.line(),
                message: format!("not a progress sidecar: {e}"),
            })
    }

    fn of(board: &Board, written: String) -> Sidecar {
        Sidecar {
            version: 1,
            written: Some(written),
            run: board.run.clone(),
            config: board.config.clone(),
            issues: board.issues.values().cloned().collect(),
            tasks: board.tasks.values().cloned().collect(),
        }
    }

    /// The board when there is no markdown file (yet).
    fn into_board(self) -> Board {
        let mut board = Board::new();
        board.run = self.run;
        board.config = self.config;
        board.apply_all(self.issues.into_iter().map(Change::Issue));
        board.apply_all(self.tasks.into_iter().map(Change::Task));
        board
    }
}

/// What a section of the file is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Lines before the first section, and any other section: prose and task lines.
    Tasks,
    /// `## Status`: the person's; `RALPH_DONE` counts here.
    Status,
    /// `## Recent Attempts`: ralph's.
    Attempts,
    /// `## Iteration Log`: ralph's.
    Log,
}

/// One line of the file, classified.
#[derive(Debug)]
enum MarkdownLine {
    /// Kept as written.
    Text(String),
    /// A heading that starts a section of `kind`.
    Heading(String, Kind),
    /// A task line; `id` is filled in by reconciliation when it has no trailer.
    Task(Checkbox),
}

#[derive(Debug)]
struct Checkbox {
    indent: String,
    bullet: char,
    checked: bool,
    name: String,
    id: Option<TaskId>,
}

/// The parsed file.
#[derive(Debug)]
struct Doc {
    lines: Vec<(MarkdownLine, Kind)>,
    done: bool,
    /// Written by an earlier ralph, whose layout [`fold_old_layout`](Doc::fold_old_layout)
    /// mended: its title, the spec's file stem, becomes the spec's title at the next write.
    old_layout: bool,
}

impl Doc {
    fn parse(text: &str, path: &Path) -> Result<Doc, StoreError> {
        let mut lines = Vec::new();
        let mut kind = Kind::Tasks;
        let mut fences = FenceTracker::default();
        let mut status = String::new();
        let mut seen: HashMap<String, usize> = HashMap::new();
        let body = text.strip_suffix('\n').unwrap_or(text);
        for (index, raw) in body.split('\n').enumerate() {
            let number = index + 1;
            let raw = raw.strip_suffix('\r').unwrap_or(raw);
            if fences.is_code(raw) {
                if kind == Kind::Status {
                    // A fence line is never a marker; keep the text so fences stay balanced.
                    status.push_str(raw);
                    status.push('\n');
                }
                lines.push((MarkdownLine::Text(raw.to_owned()), kind));
                continue;
            }
            if let Some(section) = section_of(raw) {
                kind = section;
                lines.push((MarkdownLine::Heading(raw.to_owned(), kind), kind));
                continue;
            }
            if kind == Kind::Status {
                status.push_str(raw);
                status.push('\n');
            }
            let line = match kind {
                Kind::Tasks => match checkbox(raw) {
                    Ok(Some(checkbox)) => {
                        if let Some(id) = &checkbox.id
                            && let Some(first) = seen.insert(id.to_string(), number)
                        {
                            return Err(malformed(
                                path,
                                number,
                                format!("task id {id} is used twice (also on line {first})"),
                            ));
                        }
                        MarkdownLine::Task(checkbox)
                    }
                    Ok(None) => MarkdownLine::Text(raw.to_owned()),
                    Err(message) => return Err(malformed(path, number, message)),
                },
                _ => MarkdownLine::Text(raw.to_owned()),
            };
            lines.push((line, kind));
        }
        Ok(Doc {
            lines,
            done: is_marker_line(&status, RALPH_DONE),
            old_layout: false,
        })
    }

    /// An earlier ralph wrote an empty `## Tasks` section above its own sections and put the
    /// boxes in a second `## Tasks` section at the end, below the Iteration Log. Moves that
    /// section's lines up into the empty one, so the file takes seed 003's order at its next
    /// write; any other file is left as it is.
    fn fold_old_layout(&mut self) {
        let headings: Vec<usize> = (0..self.lines.len())
            .filter(|&i| matches!(self.lines[i].0, MarkdownLine::Heading(..)))
            .collect();
        let section_end = |h: usize| {
            headings
                .iter()
                .copied()
                .find(|&j| j > h)
                .unwrap_or(self.lines.len())
        };
        let tasks_heading = |i: usize| matches!(&self.lines[i].0, MarkdownLine::Heading(t, _) if is_tasks_heading(t));
        let blank =
            |i: usize| matches!(&self.lines[i].0, MarkdownLine::Text(t) if t.trim().is_empty());
        let Some(empty) = headings
            .iter()
            .copied()
            .find(|&h| tasks_heading(h) && (h + 1..section_end(h)).all(blank))
        else {
            return;
        };
        let ralphs = |i: usize| matches!(self.lines[i].1, Kind::Attempts | Kind::Log);
        let Some(late) = headings
            .iter()
            .copied()
            .find(|&h| h > empty && tasks_heading(h) && (empty..h).any(ralphs))
        else {
            return;
        };
        let end = section_end(late);
        let mut body: Vec<_> = self.lines.drain(late..end).skip(1).collect();
        while body
            .last()
            .is_some_and(|(l, _)| matches!(l, MarkdownLine::Text(t) if t.trim().is_empty()))
        {
            body.pop();
        }
        let start = body
            .iter()
            .position(|(l, _)| !matches!(l, MarkdownLine::Text(t) if t.trim().is_empty()))
            .unwrap_or(body.len());
        let blank_line = (MarkdownLine::Text(String::new()), Kind::Tasks);
        let moved = std::iter::once(blank_line).chain(body.into_iter().skip(start));
        self.lines.splice(empty + 1..empty + 1, moved);
        self.old_layout = true;
    }

    /// The board this file and `sidecar` describe; gives ids to lines without a trailer.
    fn reconcile(&mut self, sidecar: Sidecar, hand_edited: bool) -> Board {
        let mut board = Board::new();
        board.run = sidecar.run;
        board.config = sidecar.config;
        board.declared_complete = self.done;
        board.apply_all(sidecar.issues.into_iter().map(Change::Issue));
        let mut known: HashMap<TaskId, Task> = sidecar
            .tasks
            .into_iter()
            .map(|t| (t.id.clone(), t))
            .collect();
        let mut taken: HashSet<TaskId> = known.keys().cloned().collect();
        taken.extend(self.checkboxes().filter_map(|c| c.id.clone()));
        for (line, _) in &mut self.lines {
            let MarkdownLine::Task(checkbox) = line else {
                continue;
            };
            let id = match &checkbox.id {
                Some(id) => id.clone(),
                None => {
                    let id = board.run.next_task_id(|id| taken.contains(id));
                    taken.insert(id.clone());
                    checkbox.id = Some(id.clone());
                    id
                }
            };
            let before = known.remove(&id);
            let accepted_before = before
                .as_ref()
                .is_some_and(|t| t.status == TaskStatus::Accepted);
            let task = match before {
                Some(task) => settle(task, checkbox, hand_edited),
                None => {
                    let mut task = Task::new(id, checkbox.name.clone());
                    task.origin = Some("progress".into());
                    if checkbox.checked {
                        task.status = TaskStatus::Accepted;
                        task.accepted_by = Some(AcceptedBy::Person);
                    }
                    task
                }
            };
            let ticked_by_hand = task.accepted_by == Some(AcceptedBy::Person) && !accepted_before;
            if ticked_by_hand {
                // A person's acceptance is evidence for the task, not for the spec: a gap
                // analysis answers again before the spec is complete.
                board.run.spec_check = None;
            }
            board.apply(Change::Task(task));
        }
        // A person deleted what these waited on: it is no longer needed, so it no longer
        // blocks them.
        let ids: HashSet<TaskId> = board.tasks.keys().cloned().collect();
        for task in board.tasks.values_mut() {
            task.deps.retain(|d| ids.contains(d));
        }
        board
    }

    fn checkboxes(&self) -> impl Iterator<Item = &Checkbox> {
        self.lines.iter().filter_map(|(line, _)| match line {
            MarkdownLine::Task(c) => Some(c),
            _ => None,
        })
    }
}

/// A known task as its line now shows it: the line's name and box win.
fn settle(mut task: Task, checkbox: &Checkbox, hand_edited: bool) -> Task {
    task.name = checkbox.name.clone();
    match (checkbox.checked, task.status) {
        (true, TaskStatus::Accepted | TaskStatus::Decomposed) => {}
        // Ticked by hand (or by ralph just before a crash cut off the sidecar's write: the
        // verdict, recorded before it is applied, tells the two apart).
        (true, _) => {
            task.status = TaskStatus::Accepted;
            task.kill_reason = None;
            task.accepted_by = Some(match &task.verdict {
                Some(verdict) if verdict.accepted => AcceptedBy::Verifier,
                _ => AcceptedBy::Person,
            });
        }
        (false, TaskStatus::Accepted) if hand_edited => {
            task.status = TaskStatus::Pending;
            task.verdict = None;
            task.retry_base = task.attempts;
        }
        _ => {}
    }
    task
}

/// The section a heading line starts, if it is a `#` or `##` heading.
fn section_of(raw: &str) -> Option<Kind> {
    let title = raw
        .strip_prefix("## ")
        .or_else(|| raw.strip_prefix("# "))?
        .trim();
    let level2 = raw.starts_with("## ");
    Some(match title.to_ascii_lowercase().as_str() {
        "status" if level2 => Kind::Status,
        "recent attempts" if level2 => Kind::Attempts,
        "iteration log" if level2 => Kind::Log,
        _ => Kind::Tasks,
    })
}

/// Reads a task line: `Ok(None)` for a line that is not one (prose, a link list item),
/// `Err` for one that looks like a checkbox but cannot be read.
fn checkbox(raw: &str) -> Result<Option<Checkbox>, String> {
    let rest = raw.trim_start();
    let indent = &raw[..raw.len() - rest.len()];
    let mut chars = rest.chars();
    let bullet = match chars.next() {
        Some(b @ ('-' | '*' | '+')) => b,
        _ => return Ok(None),
    };
    let Some(rest) = chars.as_str().strip_prefix(" [") else {
        return Ok(None);
    };
    let mut chars = rest.chars();
    let Some(state) = chars.next() else {
        return Ok(None);
    };
    let Some(after) = chars.as_str().strip_prefix(']') else {
        // `- [link text](…)`: not a checkbox.
        return Ok(None);
    };
    if after.starts_with('(') {
        return Ok(None);
    }
    let checked = match state {
        ' ' => false,
        'x' | 'X' => true,
        other => return Err(format!("unknown checkbox [{other}]: write [ ] or [x]")),
    };
    if after.trim().is_empty() {
        return Err("a checkbox without a task".into());
    }
    let Some(text) = after.strip_prefix(' ') else {
        return Err("no space between the checkbox and the task".into());
    };
    let (name, id) = split_trailer(text)?;
    if name.is_empty() {
        return Err("a checkbox without a task".into());
    }
    Ok(Some(Checkbox {
        indent: indent.to_owned(),
        bullet,
        checked,
        name,
        id,
    }))
}

/// Splits `name <!-- id:t-3 -->` into the name and the id.
fn split_trailer(text: &str) -> Result<(String, Option<TaskId>), String> {
    let text = text.trim();
    let Some(at) = text.rfind("<!-- id:") else {
        return Ok((text.to_owned(), None));
    };
    let id = text[at + "<!-- id:".len()..]
        .strip_suffix("-->")
        .map(str::trim)
        .filter(|id| !id.is_empty() && !id.contains(char::is_whitespace))
        .ok_or_else(|| {
            format!(
                "unreadable id trailer {:?}: write <!-- id:t-3 -->",
                &text[at..]
            )
        })?;
    Ok((text[..at].trim().to_owned(), Some(TaskId::new(id))))
}

/// The file for `board`, keeping `doc`'s prose (or a fresh skeleton when there is no file).
fn render(doc: Option<&Doc>, board: &Board) -> String {
    let fresh: Doc;
    let doc = match doc {
        Some(doc) => doc,
        None => {
            fresh = skeleton(board);
            &fresh
        }
    };
    let (mut children, orphans) = new_tasks(doc, board);
    let mut file = rewrite(doc, board, &mut children);
    let out = &mut file.lines;
    if !orphans.is_empty() {
        insert_orphans(out, file.after_last_task, &orphans);
    }
    if !file.has_status {
        insert_status(out);
    }
    if !file.has_attempts {
        append_section(out, "## Recent Attempts", attempts_body(board));
    }
    if !file.has_log {
        append_section(out, "## Iteration Log", log_body(board));
    }
    while out.last().is_some_and(|l| l.trim().is_empty()) {
        out.pop();
    }
    out.join("\n") + "\n"
}

/// The board's tasks the file does not show yet: by the parent they go under when the file
/// shows it, else unplaced.
fn new_tasks<'a>(
    doc: &Doc,
    board: &'a Board,
) -> (HashMap<&'a TaskId, Vec<&'a Task>>, Vec<&'a Task>) {
    let in_doc: HashSet<&TaskId> = doc.checkboxes().filter_map(|c| c.id.as_ref()).collect();
    let new = board.tasks.values().filter(|t| !in_doc.contains(&t.id));
    let mut children: HashMap<&TaskId, Vec<&Task>> = HashMap::new();
    let mut orphans = Vec::new();
    for task in new {
        match &task.parent {
            Some(parent) if in_doc.contains(parent) => {
                children.entry(parent).or_default().push(task)
            }
            _ => orphans.push(task),
        }
    }
    (children, orphans)
}

/// The file's lines rewritten for the board, before what it lacks is added.
struct Rewritten {
    lines: Vec<String>,
    /// Where a new top-level task line goes (after the last task line), and its indent.
    after_last_task: Option<(usize, String)>,
    has_status: bool,
    has_attempts: bool,
    has_log: bool,
}

/// `doc` line by line: prose kept, task lines rewritten from the board (each followed by
/// its new children), ralph's sections regenerated under their headings.
fn rewrite<'a>(
    doc: &Doc,
    board: &'a Board,
    children: &mut HashMap<&'a TaskId, Vec<&'a Task>>,
) -> Rewritten {
    let mut out: Vec<String> = Vec::new();
    let mut after_last_task: Option<(usize, String)> = None;
    let (mut has_status, mut has_attempts, mut has_log) = (false, false, false);
    for (line, kind) in &doc.lines {
        match line {
            MarkdownLine::Heading(text, kind) => {
                out.push(heading(doc, board, text));
                match kind {
                    Kind::Status => has_status = true,
                    Kind::Attempts => {
                        has_attempts = true;
                        out.extend(attempts_body(board));
                    }
                    Kind::Log => {
                        has_log = true;
                        out.extend(log_body(board));
                    }
                    Kind::Tasks => {}
                }
            }
            // ralph's sections are regenerated under their headings.
            _ if matches!(kind, Kind::Attempts | Kind::Log) => {}
            MarkdownLine::Text(text) => out.push(text.clone()),
            MarkdownLine::Task(checkbox) => {
                let Some(task) = checkbox.id.as_ref().and_then(|id| board.tasks.get(id)) else {
                    continue;
                };
                out.push(task_line(&checkbox.indent, checkbox.bullet, task));
                let nested = format!("{}  ", checkbox.indent);
                for child in children.remove(&task.id).unwrap_or_default() {
                    out.push(task_line(&nested, '-', child));
                }
                after_last_task = Some((out.len(), checkbox.indent.clone()));
            }
        }
    }
    Rewritten {
        lines: out,
        after_last_task,
        has_status,
        has_attempts,
        has_log,
    }
}

/// A heading as it is written back: as it stands, but for the title an earlier ralph gave
/// its own file (`# Progress: <file stem>`), which becomes the spec's title.
fn heading(doc: &Doc, board: &Board, text: &str) -> String {
    let stem = board
        .run
        .spec
        .as_deref()
        .and_then(|s| Path::new(s).file_stem())
        .map(|s| s.to_string_lossy().into_owned());
    match stem {
        Some(stem) if doc.old_layout && text == format!("# Progress: {stem}") => {
            format!("# Progress: {}", inline(&title(board)))
        }
        _ => text.to_owned(),
    }
}

/// Puts the task lines of `orphans` after the last task line. A file with no task line
/// gets them under its `## Tasks` heading, or in a new `## Tasks` section before ralph's
/// own sections: seed 003's order, tasks above Recent Attempts and the Iteration Log.
fn insert_orphans(
    out: &mut Vec<String>,
    after_last_task: Option<(usize, String)>,
    orphans: &[&Task],
) {
    let mut lines: Vec<String> = Vec::new();
    let at = match after_last_task {
        Some((at, indent)) => {
            lines.extend(orphans.iter().map(|t| task_line(&indent, '-', t)));
            at
        }
        None => {
            let at = tasks_heading(out, &mut lines);
            lines.extend(orphans.iter().map(|t| task_line("", '-', t)));
            // A blank line between the last task and the next heading.
            if out.get(at).is_some_and(|l| !l.trim().is_empty()) {
                lines.push(String::new());
            }
            at
        }
    };
    out.splice(at..at, lines);
}

/// Where the first task lines of a file go: after its `## Tasks` heading and the blank line
/// under it; else after a new heading pushed onto `lines`, placed before ralph's sections
/// (or at the end of a file without them).
fn tasks_heading(out: &[String], lines: &mut Vec<String>) -> usize {
    if let Some(at) = out.iter().position(|l| is_tasks_heading(l)) {
        let blank = out.get(at + 1).is_some_and(|l| l.trim().is_empty());
        if !blank {
            lines.push(String::new());
        }
        return at + 1 + usize::from(blank);
    }
    let at = out
        .iter()
        .position(|l| matches!(section_of(l), Some(Kind::Attempts | Kind::Log)))
        .unwrap_or(out.len());
    if at > 0 && !out[at - 1].trim().is_empty() {
        lines.push(String::new());
    }
    lines.extend(["## Tasks".to_owned(), String::new()]);
    at
}

/// Whether `line` is a `## Tasks` heading.
fn is_tasks_heading(line: &str) -> bool {
    line.strip_prefix("## ")
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("tasks"))
}

/// Adds the `## Status` section below the title (or at the top).
fn insert_status(out: &mut Vec<String>) {
    let at = out
        .iter()
        .position(|l| l.starts_with("# "))
        .map_or(0, |i| i + 1);
    let mut status: Vec<String> = ["", "## Status", "", "In progress"]
        .map(str::to_owned)
        .into();
    // Task lines right below would fall into Status: give them a section of their own.
    let tasks_follow = out[at..]
        .iter()
        .take_while(|l| section_of(l).is_none())
        .any(|l| matches!(checkbox(l), Ok(Some(_))));
    if tasks_follow {
        status.extend(["", "## Tasks", ""].map(str::to_owned));
    }
    // At the top of a file without a title, no blank line before the heading.
    let skip = usize::from(at == 0);
    out.splice(at..at, status.into_iter().skip(skip));
}

/// Adds a section of ralph's at the end, a blank line before it.
fn append_section(out: &mut Vec<String>, heading: &str, body: Vec<String>) {
    if out.last().is_some_and(|l| !l.trim().is_empty()) {
        out.push(String::new());
    }
    out.push(heading.to_owned());
    out.extend(body);
}

/// The document of a board that has no file yet.
fn skeleton(board: &Board) -> Doc {
    let name = inline(&title(board));
    let text = format!(
        "# Progress: {name}\n\n## Status\n\nIn progress\n\n## Tasks\n\n## Recent Attempts\n\n## Iteration Log\n"
    );
    // The skeleton is ralph's own text: it always parses.
    Doc::parse(&text, Path::new("<skeleton>")).unwrap_or(Doc {
        lines: Vec::new(),
        done: false,
        old_layout: false,
    })
}

/// The title of a progress file ralph writes: the spec's title, else its file stem.
fn title(board: &Board) -> String {
    let stem = || {
        board
            .run
            .spec
            .as_deref()
            .and_then(|s| Path::new(s).file_stem())
            .map(|s| s.to_string_lossy().into_owned())
    };
    board
        .run
        .spec_title
        .clone()
        .filter(|t| !t.trim().is_empty())
        .or_else(stem)
        .unwrap_or_else(|| "work".to_owned())
}

fn task_line(indent: &str, bullet: char, task: &Task) -> String {
    let mark = if matches!(task.status, TaskStatus::Accepted | TaskStatus::Decomposed) {
        'x'
    } else {
        ' '
    };
    format!(
        "{indent}{bullet} [{mark}] {} <!-- id:{} -->",
        inline(&task.name),
        task.id
    )
}

fn attempts_body(board: &Board) -> Vec<String> {
    let mut lines = vec![String::new()];
    if board.run.attempts.is_empty() {
        lines.push("_None yet._".into());
    }
    for a in &board.run.attempts {
        let next = a
            .next
            .as_deref()
            .map(|n| format!(" — next: {}", inline(n)))
            .unwrap_or_default();
        lines.push(format!(
            "- Iteration {}, {}: tried: {} — result: {}{next} ({})",
            a.iteration,
            a.task,
            inline(&a.tried),
            inline(&a.result),
            a.at
        ));
    }
    lines.push(String::new());
    lines
}

fn log_body(board: &Board) -> Vec<String> {
    let mut lines = vec![
        String::new(),
        "| Iteration | Started | Duration | Tasks Completed | Notes |".to_owned(),
        "|---|---|---|---|---|".to_owned(),
    ];
    for e in &board.run.log {
        lines.push(format!(
            "| {} | {} | {} | {} | {} |",
            e.iteration,
            cell(&e.started),
            humantime::format_duration(std::time::Duration::from_secs(e.duration().as_secs())),
            e.tasks_completed,
            cell(&e.note)
        ));
    }
    lines.push(String::new());
    lines
}

/// Text on one line that cannot open a comment (which would swallow the id trailer).
fn inline(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("<!--", "<!-")
}

/// A table cell: one line, pipes escaped.
fn cell(text: &str) -> String {
    inline(text).replace('|', "\\|")
}

/// FNV-1a (64-bit) of the text, in hex: stable across builds, unlike std's hasher.
fn fingerprint(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

fn utf8(path: &Path, bytes: Vec<u8>) -> Result<String, StoreError> {
    String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..valid]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        malformed(path, line, format!("not UTF-8: {}", e.utf8_error()))
    })
}

fn malformed(path: &Path, line: usize, message: String) -> StoreError {
    StoreError::Malformed {
        path: path.to_path_buf(),
        line,
        message,
    }
}

fn io_error(path: &Path, source: io::Error) -> StoreError {
    StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkbox_lines() {
        let c = checkbox("  - [x] Do it <!-- id:t-4 -->").unwrap().unwrap();
        assert!(c.checked);
        assert_eq!((c.indent.as_str(), c.name.as_str()), ("  ", "Do it"));
        assert_eq!(c.id.unwrap(), "t-4");
        assert!(checkbox("- [link](http://x)").unwrap().is_none());
        assert!(checkbox("- [a](x)").unwrap().is_none());
        assert!(checkbox("- plain item").unwrap().is_none());
        assert!(checkbox("-[ ] no space before").unwrap().is_none());
        assert!(checkbox("- [~] odd").unwrap_err().contains("[~]"));
        assert!(checkbox("- [ ]").unwrap_err().contains("without a task"));
        assert!(checkbox("- [ ]x").unwrap_err().contains("no space"));
        assert!(
            checkbox("- [ ] x <!-- id: -->")
                .unwrap_err()
                .contains("trailer")
        );
        assert!(checkbox("* [X] RALPH_DONE").unwrap().unwrap().checked);
    }

    #[test]
    fn ralph_done_counts_only_alone_in_status_outside_code() {
        let parse = |t: &str| Doc::parse(t, Path::new("P.md")).unwrap().done;
        assert!(parse("## Status\n\nRALPH_DONE\n"));
        assert!(parse("## Status\r\n  RALPH_DONE  \r\n## Tasks\n"));
        assert!(!parse("## Status\n\nnot RALPH_DONE yet\n"));
        assert!(!parse("## Status\n```\nRALPH_DONE\n```\n"));
        assert!(!parse("## Tasks\n\nRALPH_DONE\n"));
        assert!(!parse("## Tasks\n- [ ] RALPH_DONE\n"));
        assert!(!parse("RALPH_DONE\n## Status\n"));
        assert!(!parse("## Status\n## Recent Attempts\nRALPH_DONE\n"));
    }

    #[test]
    fn non_utf8_names_the_line() {
        let err = utf8(Path::new("P.md"), b"ok\nok\n\xff\n".to_vec()).unwrap_err();
        assert!(err.to_string().starts_with("P.md:3: not UTF-8"), "{err}");
    }

    #[test]
    fn fingerprint_is_stable() {
        assert_eq!(fingerprint(""), "cbf29ce484222325");
        assert_ne!(fingerprint("a"), fingerprint("b"));
    }
}
