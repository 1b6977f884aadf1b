//! The `Prioritizer` seam and the default [`CriticalPath`] algorithm.
//!
//! # When it runs, and what its order means
//!
//! The construct loop calls the prioritizer every time tasks are added: after INVESTIGATE
//! turns an issue into tasks, after DECOMPOSE splits a killed task, and at the end of VERIFY
//! (after gap analysis added tasks and rejected ones came back). It is given every task that
//! can still be built, and its answer is saved with the tasks that caused it. After
//! INVESTIGATE and DECOMPOSE it only places the new tasks: seed 000 has their tasks inherit
//! the issue's or the parent's priority, so every priority a task already has (computed
//! earlier, or inherited) is given to it as the task's own [`Task::priority`], which it
//! keeps; a task with none gets the prioritizer's. At the end of VERIFY it prioritizes every
//! task without an explicit priority afresh. BUILD then takes
//! the ready tasks (those whose dependencies are finished) **in the prioritizer's order**; a
//! task it has not ordered yet (added by hand, say) comes after those it has, by priority,
//! then by creation.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Serialize};

use crate::model::{Board, Complexity, Priority, Task, TaskId};
use crate::outcome::BlockedItem;

/// Counts reported after a prioritization (seed 000: `{"prioritized":5,"high":2,…}`):
/// what [`Ralph::prioritize`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.prioritize) returns.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PriorityReport {
    /// Tasks ordered.
    pub prioritized: usize,
    /// Of which high.
    pub high: usize,
    /// Of which medium.
    pub medium: usize,
    /// Of which low.
    pub low: usize,
    /// Tasks blocked first because they could never be built as they stood (on a
    /// dependency cycle, say), each with the reason it now carries; left out of the order.
    /// Only [`Ralph::prioritize`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.prioritize) blocks: the construct loop
    /// blocks such tasks when it starts, and says so in warnings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked: Vec<BlockedItem>,
}

impl PriorityReport {
    /// The counts of `order`.
    pub fn of(order: &[(TaskId, Priority)]) -> Self {
        let mut report = PriorityReport {
            prioritized: order.len(),
            ..PriorityReport::default()
        };
        for (_, priority) in order {
            match priority {
                Priority::High => report.high += 1,
                Priority::Medium => report.medium += 1,
                Priority::Low => report.low += 1,
            }
        }
        report
    }
}

/// The tasks' dependencies form a cycle, so no order exists.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PrioritizeError {
    /// A dependency cycle; `tasks` lists it in order, each depending on the next, the first
    /// repeated at the end. A task depending on itself is a cycle of one: `t-1 -> t-1`.
    #[error("dependency cycle: {}", join_ids(.tasks))]
    Cycle {
        /// The cycle, e.g. `t-1 -> t-2 -> t-1`.
        tasks: Vec<TaskId>,
    },
}

fn join_ids(ids: &[TaskId]) -> String {
    ids.iter()
        .map(TaskId::as_str)
        .collect::<Vec<_>>()
        .join(" -> ")
}

/// Orders pending tasks. Synchronous and pure. Usable as `dyn Prioritizer`.
///
/// The input is the set of tasks to order (the engine passes the pending ones); a dependency
/// on a task outside that set counts as already satisfied.
///
/// # Implementing
///
/// Return the tasks in the order BUILD should take them, each with its priority (a task's
/// explicit priority is kept whatever this says). The engine calls it whenever tasks are added (after
/// INVESTIGATE, DECOMPOSE and gap analysis) and BUILD follows the order; a task left out of
/// it is built after those in it.
///
/// ```
/// use ralph::model::{Priority, Task, TaskId};
/// use ralph::prioritize::{PrioritizeError, Prioritizer};
///
/// /// Documentation first, then the rest in the order they came.
/// struct DocsFirst;
///
/// impl Prioritizer for DocsFirst {
///     fn prioritize(&self, tasks: &[Task]) -> Result<Vec<(TaskId, Priority)>, PrioritizeError> {
///         let is_docs = |t: &Task| t.name.to_lowercase().contains("readme");
///         let (docs, rest): (Vec<&Task>, Vec<&Task>) = tasks.iter().partition(|t| is_docs(t));
///         Ok(docs.into_iter()
///             .map(|t| (t.id.clone(), Priority::High))
///             .chain(rest.into_iter().map(|t| (t.id.clone(), Priority::Medium)))
///             .collect())
///     }
/// }
///
/// let tasks = [Task::new("t-1", "Add the parser"), Task::new("t-2", "Write the README")];
/// let order = DocsFirst.prioritize(&tasks)?;
/// assert_eq!(order[0], (TaskId::from("t-2"), Priority::High));
/// # Ok::<(), PrioritizeError>(())
/// ```
#[diagnostic::on_unimplemented(
    note = "implement `ralph::Prioritizer`, or use `ralph::CriticalPath`"
)]
pub trait Prioritizer: Send + Sync {
    /// Orders `tasks` and assigns each an effective priority: the tasks in execution order,
    /// each with the priority to record for it. A task given but left out keeps its place
    /// after those ordered.
    ///
    /// # Errors
    ///
    /// [`PrioritizeError::Cycle`] naming the tasks of a dependency cycle.
    fn prioritize(&self, tasks: &[Task]) -> Result<Vec<(TaskId, Priority)>, PrioritizeError>;

    /// [`prioritize`](Self::prioritize) with what the run knows besides the tasks: the
    /// board as it stands (the spec on record is `board.run.spec`, tasks already built
    /// are in `board.tasks`) and the spec's text as the prompts carry it (empty when the
    /// board has no spec yet). The engine and `ralph task prioritize` call this one; the
    /// default ignores both and calls [`prioritize`](Self::prioritize). Override it for an
    /// order that depends on the spec or on what was built.
    ///
    /// ```
    /// use ralph::model::{Board, Priority, Task, TaskId};
    /// use ralph::prioritize::{PrioritizeError, Prioritizer};
    ///
    /// /// The tasks that name a file the spec names first.
    /// struct SpecFilesFirst;
    ///
    /// impl Prioritizer for SpecFilesFirst {
    ///     fn prioritize(&self, tasks: &[Task]) -> Result<Vec<(TaskId, Priority)>, PrioritizeError> {
    ///         self.prioritize_on(tasks, &Board::new(), "")
    ///     }
    ///
    ///     fn prioritize_on(
    ///         &self,
    ///         tasks: &[Task],
    ///         _board: &Board,
    ///         spec: &str,
    ///     ) -> Result<Vec<(TaskId, Priority)>, PrioritizeError> {
    ///         let named = |t: &Task| t.name.split(' ').any(|w| w.contains('.') && spec.contains(w));
    ///         let (first, rest): (Vec<&Task>, Vec<&Task>) = tasks.iter().partition(|t| named(t));
    ///         Ok(first.into_iter().map(|t| (t.id.clone(), Priority::High))
    ///             .chain(rest.into_iter().map(|t| (t.id.clone(), Priority::Medium)))
    ///             .collect())
    ///     }
    /// }
    ///
    /// let tasks = [Task::new("t-1", "Add a CLI"), Task::new("t-2", "Write greet.sh")];
    /// let order = SpecFilesFirst.prioritize_on(&tasks, &Board::new(), "# Greeter\nShip greet.sh.")?;
    /// assert_eq!(order[0], (TaskId::from("t-2"), Priority::High));
    /// # Ok::<(), PrioritizeError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`prioritize`](Self::prioritize).
    fn prioritize_on(
        &self,
        tasks: &[Task],
        board: &Board,
        spec: &str,
    ) -> Result<Vec<(TaskId, Priority)>, PrioritizeError> {
        let _ = (board, spec);
        self.prioritize(tasks)
    }
}

impl<T: Prioritizer + ?Sized> Prioritizer for Box<T> {
    fn prioritize(&self, tasks: &[Task]) -> Result<Vec<(TaskId, Priority)>, PrioritizeError> {
        (**self).prioritize(tasks)
    }

    fn prioritize_on(
        &self,
        tasks: &[Task],
        board: &Board,
        spec: &str,
    ) -> Result<Vec<(TaskId, Priority)>, PrioritizeError> {
        (**self).prioritize_on(tasks, board, spec)
    }
}

impl<T: Prioritizer + ?Sized> Prioritizer for Arc<T> {
    fn prioritize(&self, tasks: &[Task]) -> Result<Vec<(TaskId, Priority)>, PrioritizeError> {
        (**self).prioritize(tasks)
    }

    fn prioritize_on(
        &self,
        tasks: &[Task],
        board: &Board,
        spec: &str,
    ) -> Result<Vec<(TaskId, Priority)>, PrioritizeError> {
        (**self).prioritize_on(tasks, board, spec)
    }
}

/// Breaks the build if `Prioritizer` stops being usable as `dyn`.
#[allow(dead_code)]
fn _assert_prioritizer_object_safe(
    _: &dyn Prioritizer,
    _: Box<dyn Prioritizer>,
    _: Arc<dyn Prioritizer>,
) {
}

/// Seed 000's algorithm: dependency graph, unblock counts, critical path, complexity.
///
/// Explicit priorities are kept. Every other task gets the first rule that applies:
///
/// 1. **HIGH** when at least 3 tasks depend on it directly;
/// 2. **HIGH** when it is [small](estimate_complexity) and at least 2 tasks depend on it
///    directly;
/// 3. **LOW** when nothing depends on it and its name marks it as documentation, cleanup,
///    polish or nice-to-have (`docs`, `readme`, `changelog`, `cleanup`, `clean up`, `tidy`,
///    `polish`, `cosmetic`, `nice to have`, …);
/// 4. **HIGH** when it lies on a longest dependency chain and that chain has at least 2
///    tasks (so a set of independent tasks has no critical path);
/// 5. **MEDIUM** otherwise.
///
/// Dependents are counted directly, not transitively: the transitive count costs more than
/// linear time in general, and deep chains are already caught by rule 4. Rule 3 comes
/// before rule 4 because a leaf of the longest chain blocks nothing: running its docs early
/// does not bring any other task closer.
///
/// The order is priority descending, never before a task it depends on; ties keep the input
/// order. A dependency on an id outside the input counts as satisfied; a repeated dependency
/// counts once. The whole computation is `O((tasks + dependencies) · log tasks)` and uses no
/// recursion, so long chains cannot overflow the stack.
///
/// # Examples
///
/// ```
/// use ralph::model::{Priority, Task};
/// use ralph::{CriticalPath, Prioritizer};
///
/// let tasks = vec![
///     Task::new("t-1", "Update the README"),
///     Task::new("t-2", "Implement the config loader"),
///     Task::new("t-3", "Implement the CLI on top of the loader").with_deps(["t-2"]),
/// ];
/// let order = CriticalPath::new().prioritize(&tasks)?;
///
/// // t-2 -> t-3 is the critical path; the README can wait.
/// let order: Vec<_> = order.iter().map(|(id, p)| (id.as_str(), *p)).collect();
/// assert_eq!(
///     order,
///     [("t-2", Priority::High), ("t-3", Priority::High), ("t-1", Priority::Low)]
/// );
/// # Ok::<(), ralph::prioritize::PrioritizeError>(())
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct CriticalPath {}

impl CriticalPath {
    /// The default algorithm.
    pub fn new() -> Self {
        CriticalPath {}
    }
}

impl fmt::Display for CriticalPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("critical-path")
    }
}

impl Prioritizer for CriticalPath {
    fn prioritize(&self, tasks: &[Task]) -> Result<Vec<(TaskId, Priority)>, PrioritizeError> {
        let gathered = Gathered::new(tasks);
        let graph = Graph::new(gathered.deps);
        let topo = graph
            .topological_order()
            .map_err(|cycle| cycle_error(tasks, &cycle))?;
        let critical = graph.critical(&topo);
        // A task itself is read again only when a rule needs its text.
        let priorities: Vec<Priority> = (0..tasks.len())
            .map(|v| {
                gathered.priority[v]
                    .unwrap_or_else(|| classify(&tasks[v], graph.dependents.count(v), critical[v]))
            })
            .collect();
        let mut ids = gathered.ids;
        Ok(graph
            .order_by(&priorities)
            .into_iter()
            .filter_map(|v| ids[v].take().map(|id| (id, priorities[v])))
            .collect())
    }
}

/// Rule 1: this many direct dependents make any task HIGH.
const MANY_DEPENDENTS: usize = 3;
/// Rule 2: this many direct dependents make a small task HIGH.
const SMALL_UNBLOCKS: usize = 2;
/// Rule 4: a longest chain shorter than this is no critical path.
const MIN_CRITICAL_CHAIN: u32 = 2;
/// Text (name, notes and acceptance) of at most this many words is small work.
const SHORT_TEXT_WORDS: usize = 8;
/// Text of at least this many words is large work.
const LONG_TEXT_WORDS: usize = 150;

/// Name patterns of small work. ` … ` allows any words in between.
const SMALL_PATTERNS: &[&str] = &[
    "rename",
    "renames",
    "renaming",
    "typo",
    "typos",
    "bump",
    "bumps",
    "tweak",
    "add … field",
    "add … fields",
];
/// Name patterns of large work; they win over the small ones ("rename and refactor …").
const LARGE_PATTERNS: &[&str] = &[
    "refactor",
    "refactors",
    "refactoring",
    "migrate",
    "migrates",
    "migration",
    "redesign",
    "rewrite",
    "overhaul",
    "implement … system",
    "implement … subsystem",
];
/// Name patterns of low-value work (rule 3). Bare `document` and `comment` are left out:
/// "document store" and "comment API" are features.
const LOW_PATTERNS: &[&str] = &[
    "doc",
    "docs",
    "documentation",
    "rustdoc",
    "docstring",
    "docstrings",
    "readme",
    "changelog",
    "cleanup",
    "clean up",
    "tidy",
    "polish",
    "cosmetic",
    "cosmetics",
    "nice to have",
];

/// A task's size: its explicit complexity, else an estimate from its text.
///
/// The estimate looks for keywords in the name first, large before small:
///
/// - large: `refactor`, `migrate`/`migration`, `redesign`, `rewrite`, `overhaul`,
///   `implement … system`;
/// - small: `rename`, `typo`, `bump`, `tweak`, `add … field`.
///
/// Without a keyword it goes by the length of name, notes and acceptance together:
/// at most 8 words is small, at least 150 is large, anything between is medium. Keywords
/// are not looked for in notes and acceptance, which often say what *not* to do ("no need
/// to refactor the parser").
///
/// ```
/// use ralph::model::{Complexity, Task};
/// use ralph::prioritize::estimate_complexity;
///
/// assert_eq!(estimate_complexity(&Task::new("t-1", "Rename Config::load")), Complexity::Small);
/// assert_eq!(estimate_complexity(&Task::new("t-2", "Migrate the store to SQLite")), Complexity::Large);
/// ```
pub fn estimate_complexity(task: &Task) -> Complexity {
    if let Some(complexity) = task.complexity {
        return complexity;
    }
    let by_name = with_words(&task.name, |name| {
        if LARGE.any_in(name) {
            Some(Complexity::Large)
        } else if SMALL.any_in(name) {
            Some(Complexity::Small)
        } else {
            None
        }
    });
    by_name.unwrap_or_else(|| complexity_by_length(task))
}

fn complexity_by_length(task: &Task) -> Complexity {
    let words = [&task.name, &task.notes, &task.acceptance]
        .into_iter()
        .map(|text| words(text).count())
        .sum::<usize>();
    if words <= SHORT_TEXT_WORDS {
        Complexity::Small
    } else if words >= LONG_TEXT_WORDS {
        Complexity::Large
    } else {
        Complexity::Medium
    }
}

/// Whether the task's name marks it as documentation, cleanup, polish or nice-to-have.
fn is_low_value(task: &Task) -> bool {
    with_words(&task.name, |name| LOW.any_in(name))
}

/// The computed priority of a task without an explicit one (rules 1–5 of [`CriticalPath`]).
fn classify(task: &Task, dependents: usize, critical: bool) -> Priority {
    // Rules 1 and 2; the size estimate is only needed, and only paid for, in the 2 case.
    let unblocks_many = dependents >= MANY_DEPENDENTS
        || (dependents >= SMALL_UNBLOCKS && estimate_complexity(task) == Complexity::Small);
    if unblocks_many {
        Priority::High
    } else if dependents == 0 && is_low_value(task) {
        Priority::Low
    } else if critical {
        Priority::High
    } else {
        Priority::Medium
    }
}

/// The words of `text`: runs of letters and digits, so `nice-to-have` is three words.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
}

/// Runs `f` on the words of `text` (patterns match them ignoring ASCII case). Up to 48
/// words are held on the stack: allocating a lower-cased copy and a list per task was a
/// fifth of the time on large boards.
fn with_words<R>(text: &str, f: impl FnOnce(&[&str]) -> R) -> R {
    const ON_STACK: usize = 48;
    let mut stack = [""; ON_STACK];
    let mut rest = words(text);
    for count in 0..ON_STACK {
        match rest.next() {
            Some(word) => stack[count] = word,
            None => return f(&stack[..count]),
        }
    }
    let all: Vec<&str> = stack.into_iter().chain(rest).collect();
    f(&all)
}

/// Name patterns split once into phrases of adjacent words, not on every task: splitting
/// per task cost most of the running time on large inputs.
struct Patterns(Vec<Vec<Vec<&'static str>>>);

static SMALL: LazyLock<Patterns> = LazyLock::new(|| Patterns::parse(SMALL_PATTERNS));
static LARGE: LazyLock<Patterns> = LazyLock::new(|| Patterns::parse(LARGE_PATTERNS));
static LOW: LazyLock<Patterns> = LazyLock::new(|| Patterns::parse(LOW_PATTERNS));

impl Patterns {
    /// Space-separated words must be adjacent; ` … ` separates phrases with anything between.
    fn parse(patterns: &[&'static str]) -> Self {
        let phrases = |p: &'static str| p.split(" … ").map(|ph| ph.split(' ').collect()).collect();
        Patterns(patterns.iter().map(|p| phrases(p)).collect())
    }

    /// Whether any pattern occurs in `words`.
    fn any_in(&self, words: &[&str]) -> bool {
        self.0.iter().any(|pattern| occurs(words, pattern))
    }
}

/// Whether the phrases of `pattern` occur in `words` in order.
fn occurs(words: &[&str], pattern: &[Vec<&str>]) -> bool {
    let mut rest = words;
    for phrase in pattern {
        match rest.windows(phrase.len()).position(|w| {
            w.iter()
                .zip(phrase)
                .all(|(word, p)| word.eq_ignore_ascii_case(p))
        }) {
            Some(i) => rest = &rest[i + phrase.len()..],
            None => return false,
        }
    }
    true
}

/// Task ids to input positions (the first, for a repeated id).
///
/// The ids ralph gives tasks, `t-<n>`, are looked up in an array indexed by `n`: on large
/// boards the lookups were most of the time, nearly all of it waiting on memory, because a
/// hash table of 100,000 ids no longer fits the processor's caches and every lookup lands
/// somewhere random in it (per task they cost 2.2 times more at 100,000 tasks than at
/// 10,000). The array is 4 bytes an entry, a sixth of a table's. Other ids (`t-3a`, a
/// user's `auth-login`) go to a hash table.
struct IdIndex<'a> {
    /// At `n`: 1 + the position of `t-<n>`, or 0.
    numbered: Vec<u32>,
    other: HashMap<&'a str, usize, BuildIdHasher>,
    /// `t-<n>` with `n` at or past this goes to `other`, so that an odd id such as
    /// `t-99999999` does not make the array huge.
    limit: usize,
}

/// What the prioritizer reads of the tasks besides their texts, gathered in one pass: on
/// large boards the tasks (336 bytes each, 34 MB at 100,000) no longer fit the processor's
/// cache, and each further pass over them streams them from memory again. The dependencies
/// are resolved in the same pass, while their ids are still in the cache: those naming an
/// earlier task at once (ralph's tasks only ever name earlier ones), the rest once every id
/// is known.
struct Gathered {
    /// Each task's id, in input order (moved into the result in execution order).
    ids: Vec<Option<TaskId>>,
    /// `deps.of(v)`: the tasks `v` waits for, without unknown or repeated ones.
    deps: Adjacency,
    /// Each task's explicit priority.
    priority: Vec<Option<Priority>>,
}

/// A dependency that named no earlier task when its task was read: its place in
/// [`Adjacency::targets`] and the id it names.
struct Unresolved<'a> {
    slot: usize,
    id: &'a str,
}

/// Whether a task is new to the dependency list being built, so that a repeated dependency
/// counts once. A short list (nearly all) is scanned: it is in the cache, where an array
/// over all tasks, looked up at random, is not on large boards. A long one uses a set.
#[derive(Default)]
struct SeenDeps {
    long: std::collections::HashSet<u32, BuildIdHasher>,
}

impl SeenDeps {
    /// A list longer than this uses the set.
    const SCAN: usize = 32;

    /// Starts a new list.
    fn start(&mut self) {
        self.long.clear();
    }

    /// Whether `u` is not in `list` (the list so far; every entry went through here).
    fn is_new(&mut self, list: &[u32], u: u32) -> bool {
        if list.len() < Self::SCAN {
            return !list.contains(&u);
        }
        if self.long.is_empty() {
            self.long.extend(list);
        }
        self.long.insert(u)
    }
}

impl Gathered {
    fn new(tasks: &[Task]) -> Self {
        let n = tasks.len();
        let mut index = IdIndex::new(n);
        let mut ids = Vec::with_capacity(n);
        let mut priority = Vec::with_capacity(n);
        let mut starts: Vec<u32> = Vec::with_capacity(n + 1);
        let mut targets: Vec<u32> = Vec::with_capacity(n.saturating_mul(3));
        let mut unresolved = Vec::new();
        let mut seen = SeenDeps::default();
        starts.push(0);
        for (v, task) in tasks.iter().enumerate() {
            let first = targets.len();
            index.add(task.id.as_str(), v);
            ids.push(Some(task.id.clone()));
            priority.push(task.priority);
            seen.start();
            for dep in &task.deps {
                match index.get(dep.as_str()).map(index32) {
                    Some(u) => {
                        if seen.is_new(&targets[first..], u) {
                            targets.push(u);
                        }
                    }
                    None => {
                        unresolved.push(Unresolved {
                            slot: targets.len(),
                            id: dep.as_str(),
                        });
                        targets.push(NO_TASK);
                    }
                }
            }
            starts.push(index32(targets.len()));
        }
        let mut deps = Adjacency { starts, targets };
        if !unresolved.is_empty() {
            deps.resolve(&index, &unresolved);
        }
        Gathered {
            ids,
            deps,
            priority,
        }
    }
}

impl<'a> IdIndex<'a> {
    fn new(tasks: usize) -> Self {
        IdIndex {
            numbered: Vec::new(),
            other: HashMap::with_hasher(BuildIdHasher),
            limit: tasks.saturating_mul(4).saturating_add(16),
        }
    }

    /// Adds the task at position `v` with id `id`.
    fn add(&mut self, id: &'a str, v: usize) {
        match Self::number(id, self.limit).zip(u32::try_from(v + 1).ok()) {
            Some((n, position)) => {
                if self.numbered.len() <= n {
                    self.numbered.resize(n + 1, 0);
                }
                if self.numbered[n] == 0 {
                    self.numbered[n] = position;
                }
            }
            None => {
                self.other.entry(id).or_insert(v);
            }
        }
    }

    fn get(&self, id: &str) -> Option<usize> {
        // A `t-<n>` past the array's end is either absent or was too large for it.
        match Self::number(id, self.numbered.len()) {
            Some(n) => match self.numbered[n] {
                0 => None,
                position => Some(position as usize - 1),
            },
            None => self.other.get(id).copied(),
        }
    }

    /// `n` of an id `t-<n>` written without leading zeros, when `n` is below `limit`.
    fn number(id: &str, limit: usize) -> Option<usize> {
        let digits = id.strip_prefix("t-")?;
        let canonical = !digits.is_empty()
            && digits.len() <= 9
            && digits.bytes().all(|b| b.is_ascii_digit())
            && (digits.len() == 1 || !digits.starts_with('0'));
        canonical
            .then(|| digits.parse::<usize>().ok())
            .flatten()
            .filter(|n| *n < limit)
    }
}

/// A multiply-rotate hash (the Fx hash of rustc) for ids: not resistant to crafted
/// collisions, which is fine for a board's own ids, and several times cheaper than SipHash.
#[derive(Clone, Copy, Default)]
struct BuildIdHasher;

impl std::hash::BuildHasher for BuildIdHasher {
    type Hasher = IdHasher;

    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

struct IdHasher(u64);

impl IdHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in chunks.by_ref() {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Adjacency lists packed into one buffer (compressed sparse rows): two allocations however
/// many tasks, and each list is a contiguous slice. Indices are 4 bytes, not 8: on large
/// boards the lists then stay in the processor's cache twice as long.
struct Adjacency {
    starts: Vec<u32>,
    targets: Vec<u32>,
}

impl Adjacency {
    fn list(&self, v: usize) -> &[u32] {
        &self.targets[self.starts[v] as usize..self.starts[v + 1] as usize]
    }

    /// The tasks at the other end of `v`'s edges.
    fn of(&self, v: usize) -> impl Iterator<Item = usize> + '_ {
        self.list(v).iter().map(|&u| u as usize)
    }

    /// How many edges `v` has.
    fn count(&self, v: usize) -> usize {
        self.list(v).len()
    }

    fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// Fills in the dependencies that named a task not read yet (with duplicate task ids,
    /// the first), then drops those naming no task and the repeats.
    fn resolve(&mut self, index: &IdIndex<'_>, unresolved: &[Unresolved<'_>]) {
        for dep in unresolved {
            if let Some(u) = index.get(dep.id) {
                self.targets[dep.slot] = index32(u);
            }
        }
        let mut seen = SeenDeps::default();
        let mut kept = 0;
        for v in 0..self.len() {
            let list = self.starts[v] as usize..self.starts[v + 1] as usize;
            let first = kept;
            self.starts[v] = index32(first);
            seen.start();
            for slot in list {
                let u = self.targets[slot];
                if u != NO_TASK && seen.is_new(&self.targets[first..kept], u) {
                    self.targets[kept] = u;
                    kept += 1;
                }
            }
        }
        let n = self.len();
        self.starts[n] = index32(kept);
        self.targets.truncate(kept);
    }

    /// The same edges pointing the other way; each reversed list is in ascending order.
    fn reversed(&self) -> Adjacency {
        let n = self.len();
        let mut starts = vec![0u32; n + 1];
        for &u in &self.targets {
            starts[u as usize + 1] += 1;
        }
        for v in 0..n {
            starts[v + 1] += starts[v];
        }
        let mut next = starts.clone();
        let mut targets = vec![0u32; self.targets.len()];
        for v in 0..n {
            for u in self.of(v) {
                targets[next[u] as usize] = index32(v);
                next[u] += 1;
            }
        }
        Adjacency { starts, targets }
    }
}

/// In [`Adjacency::targets`] while being built: a dependency naming no task (yet).
const NO_TASK: u32 = u32::MAX;

/// A task index or edge count as stored: boards have fewer than 2^32 tasks and edges (one
/// that large would not fit in memory).
fn index32(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// The dependency graph over task indices (input positions).
struct Graph {
    /// `deps.of(v)`: the tasks `v` waits for.
    deps: Adjacency,
    /// `dependents.of(v)`: the tasks waiting for `v`.
    dependents: Adjacency,
}

impl Graph {
    /// The graph of `deps` (resolved, without unknown or repeated dependencies).
    fn new(deps: Adjacency) -> Self {
        let dependents = deps.reversed();
        Graph { deps, dependents }
    }

    fn in_degrees(&self) -> Vec<u32> {
        (0..self.deps.len())
            .map(|v| index32(self.deps.count(v)))
            .collect()
    }

    /// Kahn's algorithm; on a cycle, the indices of one cycle instead.
    fn topological_order(&self) -> Result<Vec<usize>, Vec<usize>> {
        let mut waiting = self.in_degrees();
        let mut order: Vec<usize> = (0..waiting.len()).filter(|&v| waiting[v] == 0).collect();
        // `order` doubles as the FIFO queue: everything before `next` is processed.
        let mut next = 0;
        while let Some(&v) = order.get(next) {
            next += 1;
            for w in self.dependents.of(v) {
                waiting[w] -= 1;
                if waiting[w] == 0 {
                    order.push(w);
                }
            }
        }
        if order.len() == waiting.len() {
            Ok(order)
        } else {
            Err(self.find_cycle(&waiting))
        }
    }

    /// One cycle among the tasks Kahn's algorithm could not release (`waiting > 0`), each
    /// depending on the next, starting at its lowest index.
    ///
    /// A stuck task always has a stuck dependency, so walking from one stuck task to a stuck
    /// dependency must revisit a task; the walk from the revisit on is the cycle. Iterative
    /// and linear, unlike a recursive DFS.
    fn find_cycle(&self, waiting: &[u32]) -> Vec<usize> {
        const UNSEEN: usize = usize::MAX;
        let stuck = |v: usize| waiting[v] > 0;
        let mut seen_at = vec![UNSEEN; waiting.len()];
        let mut path = Vec::new();
        let mut v = (0..waiting.len()).find(|&v| stuck(v)).unwrap_or_default();
        while seen_at[v] == UNSEEN {
            seen_at[v] = path.len();
            path.push(v);
            v = self
                .deps
                .of(v)
                .find(|&u| stuck(u))
                .expect("a task Kahn's algorithm left waiting has a dependency left waiting");
        }
        let mut cycle = path.split_off(seen_at[v]);
        let lowest = (0..cycle.len())
            .min_by_key(|&i| cycle[i])
            .unwrap_or_default();
        cycle.rotate_left(lowest);
        cycle
    }

    /// Whether each task lies on a longest chain of at least [`MIN_CRITICAL_CHAIN`] tasks.
    ///
    /// `depth` is the longest chain ending at a task, `height` the longest starting at it;
    /// a task is on a longest chain exactly when the two together (counting it once) reach
    /// the overall longest.
    fn critical(&self, topo: &[usize]) -> Vec<bool> {
        let n = topo.len();
        let mut depth = vec![1u32; n];
        for &v in topo {
            depth[v] += self.deps.of(v).map(|u| depth[u]).max().unwrap_or(0);
        }
        let mut height = vec![1u32; n];
        for &v in topo.iter().rev() {
            height[v] += self.dependents.of(v).map(|w| height[w]).max().unwrap_or(0);
        }
        let longest = depth.iter().copied().max().unwrap_or(0);
        if longest < MIN_CRITICAL_CHAIN {
            return vec![false; n];
        }
        (0..n)
            .map(|v| depth[v] + height[v] - 1 == longest)
            .collect()
    }

    /// Kahn's algorithm with a heap of ready tasks per priority: the highest priority goes
    /// first, then the lowest input index. The graph is known to be acyclic. (Three heaps
    /// of 4-byte indices, not one of (priority, index) pairs: a third of the memory, and
    /// popping was a fifth of the time on large boards.)
    fn order_by(&self, priorities: &[Priority]) -> Vec<usize> {
        let level = |p: Priority| match p {
            Priority::High => 0,
            Priority::Medium => 1,
            Priority::Low => 2,
        };
        let mut waiting = self.in_degrees();
        let mut ready: [BinaryHeap<Reverse<u32>>; 3] = Default::default();
        let make_ready = |ready: &mut [BinaryHeap<Reverse<u32>>; 3], v: usize| {
            // Fewer than 2^32 tasks: a board that large would not fit in memory anyway.
            ready[level(priorities[v])].push(Reverse(v as u32));
        };
        for v in (0..waiting.len()).filter(|&v| waiting[v] == 0) {
            make_ready(&mut ready, v);
        }
        let mut order = Vec::with_capacity(waiting.len());
        while let Some(Reverse(v)) = ready.iter_mut().find_map(BinaryHeap::pop) {
            let v = v as usize;
            order.push(v);
            for w in self.dependents.of(v) {
                waiting[w] -= 1;
                if waiting[w] == 0 {
                    make_ready(&mut ready, w);
                }
            }
        }
        order
    }
}

fn cycle_error(tasks: &[Task], cycle: &[usize]) -> PrioritizeError {
    let mut ids: Vec<TaskId> = cycle.iter().map(|&v| tasks[v].id.clone()).collect();
    if let Some(first) = ids.first().cloned() {
        ids.push(first);
    }
    PrioritizeError::Cycle { tasks: ids }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    /// A task with a medium-sized name (9–149 words), so no size rule fires by accident.
    fn task(id: &str, name: &str) -> Task {
        Task::new(id, name)
            .with_acceptance("the behaviour is covered by tests and documented where it matters")
    }

    fn run(tasks: &[Task]) -> Vec<(TaskId, Priority)> {
        CriticalPath::new().prioritize(tasks).expect("no cycle")
    }

    fn priority_of(out: &[(TaskId, Priority)], id: &str) -> Priority {
        out.iter()
            .find(|(task, _)| *task == id)
            .map(|(_, priority)| *priority)
            .expect("task in the order")
    }

    fn ids(out: &[(TaskId, Priority)]) -> Vec<&str> {
        out.iter().map(|(id, _)| id.as_str()).collect()
    }

    fn cycle_of(tasks: &[Task]) -> Vec<String> {
        match CriticalPath::new().prioritize(tasks) {
            Err(PrioritizeError::Cycle { tasks }) => {
                tasks.iter().map(ToString::to_string).collect()
            }
            Ok(out) => panic!("expected a cycle, got {:?}", ids(&out)),
        }
    }

    /// A chain `c-1 <- c-2 <- … <- c-len` of ordinary tasks, to give the graph a critical
    /// path that the tasks under test are not on.
    fn chain(len: usize) -> Vec<Task> {
        (1..=len)
            .map(|i| {
                let t = task(&format!("c-{i}"), "Implement a step of the pipeline");
                if i == 1 {
                    t
                } else {
                    t.with_deps([format!("c-{}", i - 1)])
                }
            })
            .collect()
    }

    #[rstest]
    #[case::low(Priority::Low)]
    #[case::medium(Priority::Medium)]
    #[case::high(Priority::High)]
    fn explicit_priority_is_kept(#[case] explicit: Priority) {
        // Computed, this task would be HIGH (three dependents) or LOW (docs).
        let tasks = vec![
            task("t-1", "Write the docs").with_priority(explicit),
            task("t-2", "Implement parsing").with_deps(["t-1"]),
            task("t-3", "Implement checking").with_deps(["t-1"]),
            task("t-4", "Implement output").with_deps(["t-1"]),
        ];
        assert_eq!(priority_of(&run(&tasks), "t-1"), explicit);
    }

    #[test]
    fn small_task_unblocking_two_is_high_and_a_medium_one_is_not() {
        let mut tasks = chain(4);
        tasks.extend([
            task("s", "Rename Settings to Config"),
            task("s-1", "Implement loading").with_deps(["s"]),
            task("s-2", "Implement saving").with_deps(["s"]),
            task("m", "Implement the settings dialog"),
            task("m-1", "Implement theming").with_deps(["m"]),
            task("m-2", "Implement shortcuts").with_deps(["m"]),
        ]);
        let out = run(&tasks);
        assert_eq!(priority_of(&out, "s"), Priority::High);
        assert_eq!(priority_of(&out, "m"), Priority::Medium);
        assert_eq!(priority_of(&out, "s-1"), Priority::Medium);
    }

    #[test]
    fn three_dependents_make_even_a_large_task_high() {
        let mut tasks = chain(4);
        tasks.extend([
            task("big", "Refactor the storage layer"),
            task("d-1", "Implement a").with_deps(["big"]),
            task("d-2", "Implement b").with_deps(["big"]),
            task("d-3", "Implement c").with_deps(["big"]),
        ]);
        assert_eq!(priority_of(&run(&tasks), "big"), Priority::High);
    }

    #[test]
    fn critical_path_chain_is_high() {
        let tasks = vec![
            task("t-1", "Implement the lexer"),
            task("t-2", "Implement the parser").with_deps(["t-1"]),
            task("t-3", "Implement the evaluator").with_deps(["t-2"]),
            task("t-4", "Implement the pretty printer").with_deps(["t-1"]),
            task("t-5", "Implement the config file"),
        ];
        let out = run(&tasks);
        for id in ["t-1", "t-2", "t-3"] {
            assert_eq!(priority_of(&out, id), Priority::High, "{id}");
        }
        assert_eq!(priority_of(&out, "t-4"), Priority::Medium);
        assert_eq!(priority_of(&out, "t-5"), Priority::Medium);
    }

    #[rstest]
    #[case("Update the README")]
    #[case("Write documentation for the config options")]
    #[case("Fix typo in docs")]
    #[case("Cleanup unused imports")]
    #[case("Clean up the test helpers")]
    #[case("Polish CLI output")]
    #[case("Nice-to-have: coloured log lines")]
    #[case("Add CHANGELOG entry")]
    fn docs_and_cleanup_blocking_nothing_are_low(#[case] name: &str) {
        let tasks = vec![task("t-1", "Implement the parser"), task("t-2", name)];
        assert_eq!(priority_of(&run(&tasks), "t-2"), Priority::Low);
    }

    #[test]
    fn docs_task_that_blocks_something_is_not_low() {
        let tasks = vec![
            task("t-1", "Write the API docs"),
            task("t-2", "Implement the client").with_deps(["t-1"]),
        ];
        assert_eq!(priority_of(&run(&tasks), "t-1"), Priority::High);
    }

    #[test]
    fn docs_leaf_of_the_critical_path_stays_low() {
        let tasks = vec![
            task("t-1", "Implement the API"),
            task("t-2", "Write the API docs").with_deps(["t-1"]),
        ];
        let out = run(&tasks);
        assert_eq!(priority_of(&out, "t-1"), Priority::High);
        assert_eq!(priority_of(&out, "t-2"), Priority::Low);
    }

    #[rstest]
    #[case("Implement the parser")]
    #[case("Add a retry to the HTTP client")]
    #[case("Support a document store backend")]
    #[case("Rename the binary")]
    fn independent_tasks_are_medium(#[case] name: &str) {
        let tasks = vec![task("t-1", "Implement the lexer"), task("t-2", name)];
        let out = run(&tasks);
        assert_eq!(priority_of(&out, "t-1"), Priority::Medium);
        assert_eq!(priority_of(&out, "t-2"), Priority::Medium);
    }

    #[rstest]
    #[case::explicit(Task::new("t", "Refactor everything").with_complexity(Complexity::Small), Complexity::Small)]
    #[case::rename(task("t", "Rename Foo to Bar"), Complexity::Small)]
    #[case::typo(task("t", "Fix a typo in the error message"), Complexity::Small)]
    #[case::add_field(task("t", "Add a timeout field to Config"), Complexity::Small)]
    #[case::bump(task("t", "Bump tokio"), Complexity::Small)]
    #[case::refactor(task("t", "Refactor the store"), Complexity::Large)]
    #[case::migrate(task("t", "Migrate to the new API"), Complexity::Large)]
    #[case::large_beats_small(task("t", "Rename and redesign the engine"), Complexity::Large)]
    #[case::implement_system(task("t", "Implement the plugin system"), Complexity::Large)]
    #[case::short_text(Task::new("t", "Add retries"), Complexity::Small)]
    #[case::long_text(Task::new("t", "Add retries").with_notes("word ".repeat(150)), Complexity::Large)]
    #[case::ordinary(task("t", "Add retries to the client"), Complexity::Medium)]
    #[case::keyword_only_in_notes(task("t", "Add retries").with_notes("do not refactor"), Complexity::Medium)]
    fn complexity_estimate(#[case] t: Task, #[case] expected: Complexity) {
        assert_eq!(estimate_complexity(&t), expected);
    }

    #[test]
    fn order_never_puts_a_task_before_its_dependency() {
        let tasks = vec![
            task("t-1", "Implement a").with_priority(Priority::Low),
            task("t-2", "Implement b")
                .with_deps(["t-1"])
                .with_priority(Priority::High),
            task("t-3", "Implement c").with_priority(Priority::Medium),
        ];
        assert_eq!(ids(&run(&tasks)), ["t-3", "t-1", "t-2"]);
    }

    #[test]
    fn order_is_priority_descending() {
        let tasks = vec![
            task("t-1", "a").with_priority(Priority::Low),
            task("t-2", "b").with_priority(Priority::Medium),
            task("t-3", "c").with_priority(Priority::High),
        ];
        assert_eq!(ids(&run(&tasks)), ["t-3", "t-2", "t-1"]);
    }

    #[test]
    fn ties_keep_input_order() {
        let tasks: Vec<Task> = ["t-4", "t-2", "t-9", "t-1"]
            .into_iter()
            .map(|id| task(id, "Implement something"))
            .collect();
        assert_eq!(ids(&run(&tasks)), ["t-4", "t-2", "t-9", "t-1"]);
    }

    #[test]
    fn dependency_on_unknown_id_is_ignored() {
        let tasks = vec![task("t-1", "Implement a").with_deps(["t-99"])];
        let out = run(&tasks);
        assert_eq!(ids(&out), ["t-1"]);
        // No chain of two, so no critical path.
        assert_eq!(priority_of(&out, "t-1"), Priority::Medium);
    }

    #[test]
    fn repeated_dependency_counts_once() {
        let mut tasks = chain(4);
        tasks.extend([
            task("t-1", "Implement a"),
            task("t-2", "Implement b").with_deps(["t-1", "t-1", "t-1"]),
        ]);
        assert_eq!(priority_of(&run(&tasks), "t-1"), Priority::Medium);
    }

    #[test]
    fn repeated_dependency_on_a_later_task_counts_once() {
        let mut tasks = chain(4);
        tasks.extend([
            task("t-2", "Implement b").with_deps(["t-1", "t-99", "t-1", "t-1"]),
            task("t-1", "Implement a"),
        ]);
        let out = run(&tasks);
        assert_eq!(priority_of(&out, "t-1"), Priority::Medium);
        let at = |id: &str| ids(&out).iter().position(|&x| x == id);
        assert!(at("t-1") < at("t-2"), "{:?}", ids(&out));
    }

    #[rstest]
    #[case::earlier(false)]
    #[case::later(true)]
    fn a_long_dependency_list_counts_each_repeat_once(#[case] later: bool) {
        // 40 tasks (more than a list is scanned for), each named three times by `all`.
        let named: Vec<Task> = (0..40)
            .map(|i| task(&format!("d-{i}"), "Implement a part"))
            .collect();
        let deps: Vec<String> = (0..120).map(|i| format!("d-{}", i % 40)).collect();
        let all = task("all", "Implement the whole").with_deps(deps);
        let mut tasks = chain(4);
        if later {
            tasks.push(all);
            tasks.extend(named);
        } else {
            tasks.extend(named);
            tasks.push(all);
        }
        let out = run(&tasks);
        // Each has one dependent, not three (which would make it HIGH).
        for i in 0..40 {
            assert_eq!(
                priority_of(&out, &format!("d-{i}")),
                Priority::Medium,
                "d-{i}"
            );
        }
        assert_eq!(ids(&out).last(), Some(&"all"));
    }

    #[test]
    fn cycle_of_three_is_named_in_order() {
        let tasks = vec![
            task("t-0", "Implement entry").with_deps(["t-2"]),
            task("t-1", "Implement a").with_deps(["t-2"]),
            task("t-2", "Implement b").with_deps(["t-3"]),
            task("t-3", "Implement c").with_deps(["t-1"]),
            task("t-4", "Implement d"),
        ];
        assert_eq!(cycle_of(&tasks), ["t-1", "t-2", "t-3", "t-1"]);
        let err = CriticalPath::new().prioritize(&tasks).unwrap_err();
        assert_eq!(
            err.to_string(),
            "dependency cycle: t-1 -> t-2 -> t-3 -> t-1"
        );
    }

    #[test]
    fn self_dependency_is_a_cycle_of_one() {
        let tasks = vec![
            task("t-1", "Implement a"),
            task("t-2", "Implement b").with_deps(["t-1", "t-2"]),
        ];
        assert_eq!(cycle_of(&tasks), ["t-2", "t-2"]);
    }

    /// `t-i` depends on `t-(i-1)`, listed last to first so the order has to be rebuilt.
    fn long_chain(len: usize) -> Vec<Task> {
        (0..len)
            .rev()
            .map(|i| {
                let t = Task::new(format!("t-{i}"), "step");
                if i == 0 {
                    t
                } else {
                    t.with_deps([format!("t-{}", i - 1)])
                }
            })
            .collect()
    }

    #[test]
    fn chain_of_100k_does_not_overflow() {
        let out = run(&long_chain(100_000));
        assert_eq!(PriorityReport::of(&out).high, 100_000);
        let in_order = out
            .iter()
            .enumerate()
            .all(|(i, (id, _))| id.as_str() == format!("t-{i}"));
        assert!(in_order);
    }

    #[test]
    fn cycle_of_100k_does_not_overflow() {
        let mut tasks = long_chain(100_000);
        tasks[99_999].deps.push(TaskId::new("t-99999"));
        let cycle = cycle_of(&tasks);
        assert_eq!(cycle.len(), 100_001);
        assert_eq!(
            (cycle[0].as_str(), cycle[1].as_str()),
            ("t-99999", "t-99998")
        );
    }

    #[test]
    fn report_counts_every_task() {
        let tasks = vec![
            task("t-1", "Implement a"),
            task("t-2", "Implement b").with_deps(["t-1"]),
            task("t-3", "Update the README"),
            task("t-4", "Implement c").with_priority(Priority::Low),
        ];
        let report = PriorityReport::of(&run(&tasks));
        let expected = PriorityReport {
            prioritized: 4,
            high: 2,
            medium: 0,
            low: 2,
            blocked: Vec::new(),
        };
        assert_eq!(report, expected);
    }

    #[test]
    fn empty_input_gives_empty_order() {
        assert_eq!(run(&[]), []);
    }

    #[test]
    fn same_input_gives_same_output() {
        let names = ["Rename x", "Implement y", "Update docs", "Refactor z"];
        let tasks: Vec<Task> = (0..500)
            .map(|i: usize| {
                let deps = [i / 2, i / 3, i.saturating_sub(7)]
                    .into_iter()
                    .filter(|&d| d < i)
                    .map(|d| format!("t-{d}"));
                Task::new(format!("t-{i}"), names[i % names.len()]).with_deps(deps)
            })
            .collect();
        assert_eq!(run(&tasks), run(&tasks));
    }
}
