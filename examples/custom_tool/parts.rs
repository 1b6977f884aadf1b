//! The four parts of a tool built on ralph, written the way the trait docs show: a gate that
//! checks a JSON file parses, a prioritizer that takes small tasks first, a store that keeps
//! the state in one JSON file, and an observer that prints a line per event.
//!
//! `tests/construct/custom_tool.rs` drives these same parts with a scripted agent.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ralph::gate::{Gate, GateContext, GateError, GateReport, GateStatus};
use ralph::model::{Board, Change, Complexity, Priority, Task, TaskId};
use ralph::prioritize::{CriticalPath, PrioritizeError, Prioritizer};
use ralph::store::{Store, StoreError};
use ralph::{Agent, BuildError, Event, Observer, Ralph, async_trait};

/// Builds the tool's [`Ralph`]: `agent` works in `workspace`, the state lives in
/// `state.json` there, and every event is printed to `out`.
pub(crate) fn assemble(
    workspace: &Path,
    agent: impl Agent + 'static,
    out: impl Write + Send + 'static,
) -> Result<Ralph, BuildError> {
    Ralph::builder()
        .workspace(workspace)
        .agent(agent)
        .gate(JsonParses::new("config.json"))
        .prioritizer(SmallFirst)
        .store(JsonFileStore::new(workspace.join("state.json")))
        .observer(LinePrinter::new(out))
        .build()
}

/// A required gate: the file must exist and parse as JSON. A parse error, with its line and
/// column, is the gate's output, which the next attempt's prompt shows the agent.
pub(crate) struct JsonParses {
    file: PathBuf,
}

impl JsonParses {
    /// Checks `file`, relative to the workspace.
    pub(crate) fn new(file: impl Into<PathBuf>) -> Self {
        JsonParses { file: file.into() }
    }
}

#[async_trait]
impl Gate for JsonParses {
    fn name(&self) -> &str {
        "json"
    }

    async fn check(&self, ctx: GateContext) -> Result<GateReport, GateError> {
        let path = ctx.workspace.join(&self.file);
        let verdict = match tokio::fs::read(&path).await {
            Ok(bytes) => serde_json::from_slice::<serde_json::Value>(&bytes)
                .map(|_| format!("{} parses", self.file.display()))
                .map_err(|e| format!("{}: {e}", self.file.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(format!("{} does not exist", self.file.display()))
            }
            Err(e) => return Err(GateError::backend(self.name(), e)),
        };
        let (status, said) = match verdict {
            Ok(said) => (GateStatus::Passed, said),
            Err(said) => (
                GateStatus::Failed {
                    code: None,
                    signal: None,
                },
                said,
            ),
        };
        Ok(GateReport::new(self.name(), self.required(), status).with_output(&said))
    }
}

/// Small tasks before medium before large (no estimate counts as medium), a task never
/// before the tasks it depends on, and otherwise the order they came in.
pub(crate) struct SmallFirst;

impl Prioritizer for SmallFirst {
    fn prioritize(&self, tasks: &[Task]) -> Result<Vec<(TaskId, Priority)>, PrioritizeError> {
        let size = |t: &Task| t.complexity.unwrap_or(Complexity::Medium);
        let mut waiting: Vec<&Task> = tasks.iter().collect();
        waiting.sort_by_key(|t| size(t)); // stable: ties keep their order
        let known: HashSet<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
        let mut placed: HashSet<&str> = HashSet::new();
        let mut order = Vec::with_capacity(tasks.len());
        while !waiting.is_empty() {
            let ready = waiting.iter().position(|t| {
                t.deps
                    .iter()
                    .all(|d| !known.contains(d.as_str()) || placed.contains(d.as_str()))
            });
            let Some(next) = ready else {
                // A cycle: the built-in prioritizer finds it and names it in order.
                return CriticalPath::new().prioritize(tasks);
            };
            let task = waiting.remove(next);
            placed.insert(task.id.as_str());
            let priority = match size(task) {
                Complexity::Small => Priority::High,
                Complexity::Medium => Priority::Medium,
                _ => Priority::Low,
            };
            order.push((task.id.clone(), priority));
        }
        Ok(order)
    }
}

/// The state as one JSON file: the list of every change, replayed on load. Each save writes
/// a temporary file, syncs it and renames it over the old one, so a crash leaves the old
/// file or the new one, never half of either.
pub(crate) struct JsonFileStore {
    path: PathBuf,
    /// One save at a time.
    writing: Mutex<()>,
}

impl JsonFileStore {
    /// Keeps the state in `path`.
    pub(crate) fn new(path: impl Into<PathBuf>) -> Self {
        JsonFileStore {
            path: path.into(),
            writing: Mutex::new(()),
        }
    }

    fn read(&self) -> Result<Vec<Change>, StoreError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| StoreError::Malformed {
                path: self.path.clone(),
                line: e.line(),
                message: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(source) => Err(StoreError::Io {
                path: self.path.clone(),
                source,
            }),
        }
    }

    fn write(&self, changes: &[Change]) -> Result<(), StoreError> {
        let fail = |source| StoreError::Io {
            path: self.path.clone(),
            source,
        };
        let json = serde_json::to_vec_pretty(changes).map_err(|source| StoreError::Encode {
            path: self.path.clone(),
            source,
        })?;
        let temporary = self.path.with_extension("json.tmp");
        let mut file = std::fs::File::create(&temporary).map_err(fail)?;
        file.write_all(&json).map_err(fail)?;
        file.sync_all().map_err(fail)?;
        std::fs::rename(&temporary, &self.path).map_err(fail)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(fail)?;
        }
        Ok(())
    }
}

#[async_trait]
impl Store for JsonFileStore {
    async fn load(&self) -> Result<Board, StoreError> {
        let mut board = Board::default();
        board.apply_all(self.read()?);
        Ok(board)
    }

    async fn persist(&self, changes: &[Change]) -> Result<(), StoreError> {
        // Small files and a short lock: blocking here is fine for this tool. A store with
        // slow I/O would move it to `tokio::task::spawn_blocking`.
        let _one_at_a_time = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let mut all = self.read()?;
        all.extend_from_slice(changes);
        self.write(&all)
    }
}

/// One line per event that matters to a person watching.
pub(crate) struct LinePrinter {
    out: Mutex<Box<dyn Write + Send>>,
}

impl LinePrinter {
    /// Prints to `out`.
    pub(crate) fn new(out: impl Write + Send + 'static) -> Self {
        LinePrinter {
            out: Mutex::new(Box::new(out)),
        }
    }
}

impl Observer for LinePrinter {
    fn on_event(&self, event: &Event) {
        let line = match event {
            Event::TaskStarted {
                task,
                name,
                attempt,
            } => {
                format!("start   {task} {name} (attempt {attempt})")
            }
            Event::GateFinished {
                task, gate, status, ..
            } => format!(
                "gate    {task} {gate} {}",
                if status.passed() { "passed" } else { "failed" }
            ),
            Event::TaskDone { task } => format!("done    {task}"),
            Event::TaskBlocked { task, reason } => format!("blocked {task}: {reason}"),
            Event::Verdict { task, accepted, .. } => {
                format!(
                    "verdict {task} {}",
                    if *accepted { "accepted" } else { "rejected" }
                )
            }
            Event::Finished { message, .. } => format!("end     {message}"),
            _ => return,
        };
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        // A printer that cannot print must not stop the run.
        let _ = writeln!(out, "{line}");
    }
}
