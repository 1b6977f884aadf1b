//! What makes a task record sound, in one place for the two places records come in: a
//! person's edit ([`Ralph::add_task`](https://docs.rs/ralph-loop/latest/ralph/struct.Ralph.html#method.add_task)) is refused naming the field,
//! and a board loaded for a run has each unsound record blocked with the reason, so that a
//! bad record (written by an older ralph, or by hand) holds back only itself and what waits
//! on it, never every run.
//!
//! - An id names a git branch (`ralph-task/<id>`) and a folder (`.ralph/worktrees/<id>`),
//!   so it is made of a safe alphabet ([`id_problem`]).
//! - A dependency names a task on the board ([`missing_deps`]).
//! - Dependencies make no cycle ([`cycles`]): no task of one could ever be built.
//! - A dependency names no decomposed task: it never finishes, its subtasks do. DECOMPOSE
//!   rewires the dependents on the board when it splits a task; a dependency it could not
//!   see (a record written by hand, an agent's answer naming the old id) is rewired to the
//!   subtasks where it comes in ([`rewired_deps`], [`dep_targets`]), and a task depending
//!   on a decomposed task with no subtask on the board is blocked.

use std::collections::{HashMap, HashSet, VecDeque};

use super::{Board, Task, TaskId, TaskStatus};

/// The longest id, in bytes: it names a branch and a folder.
pub const MAX_ID_LEN: usize = 64;

/// Why `id` cannot name a git branch or a folder, if it cannot: an id is ASCII letters,
/// digits, `-`, `_` and `.`, does not start with `.` or `-`, holds no `..`, does not end
/// with `.` or `.lock` (git refuses those branch names), and is 1 to [`MAX_ID_LEN`] bytes.
pub fn id_problem(id: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    Some(if id.is_empty() {
        "is empty".to_owned()
    } else if id.len() > MAX_ID_LEN {
        format!("is {} bytes long; at most {MAX_ID_LEN}", id.len())
    } else if let Some(c) = id.chars().find(|c| !allowed(*c)) {
        format!("{id:?} holds {c:?}; an id is ASCII letters, digits, `-`, `_` and `.`")
    } else if id.starts_with(['.', '-']) {
        format!("{id:?} starts with {:?}", &id[..1])
    } else if id.contains("..") {
        format!("{id:?} holds `..`")
    } else if id.ends_with('.') || id.ends_with(".lock") {
        format!("{id:?} ends with `.` or `.lock`, which git refuses in a branch name")
    } else {
        return None;
    })
}

/// The dependencies of `task` that name no task on `board`.
pub fn missing_deps<'a>(board: &Board, task: &'a Task) -> Vec<&'a TaskId> {
    task.deps
        .iter()
        .filter(|d| !board.tasks.contains_key(*d))
        .collect()
}

/// What a dependency on `dep` stands for: `dep` itself, or when it was decomposed, the
/// subtasks that replaced it (theirs in turn where they were decomposed too), in board
/// order. Empty for a decomposed task with no subtask on the board.
pub fn dep_targets(board: &Board, dep: &TaskId) -> Vec<TaskId> {
    let mut targets = Vec::new();
    let mut seen: HashSet<&TaskId> = HashSet::new();
    let mut stack = vec![dep];
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            // A parent chain that loops (only by hand): each task once.
            continue;
        }
        match board.tasks.get(id) {
            Some(task) if task.status == TaskStatus::Decomposed => {
                let subtasks = board
                    .tasks
                    .values()
                    .filter(|t| t.parent.as_ref() == Some(id));
                // Reversed onto the stack, so they come off in board order.
                let before = stack.len();
                stack.extend(subtasks.map(|t| &t.id));
                stack[before..].reverse();
            }
            _ => targets.push(id.clone()),
        }
    }
    targets
}

/// `task`'s dependencies with each one on a decomposed task replaced by its subtasks
/// ([`dep_targets`]), each once; `None` when none is to be replaced. A decomposed task with
/// no subtask stays: [`unsound`] blocks the task over it.
pub fn rewired_deps(board: &Board, task: &Task) -> Option<Vec<TaskId>> {
    let decomposed = |d: &TaskId| {
        board
            .tasks
            .get(d)
            .is_some_and(|t| t.status == TaskStatus::Decomposed)
    };
    if !task.deps.iter().any(decomposed) {
        return None;
    }
    let mut deps: Vec<TaskId> = Vec::with_capacity(task.deps.len());
    for dep in &task.deps {
        let targets = dep_targets(board, dep);
        let targets = match targets.is_empty() {
            true => vec![dep.clone()],
            false => targets,
        };
        for target in targets {
            if !deps.contains(&target) {
                deps.push(target);
            }
        }
    }
    (deps != task.deps).then_some(deps)
}

/// The first dependency of `task` on a decomposed task with no subtask on the board: one
/// nothing can ever satisfy.
fn decomposed_into_nothing<'a>(board: &Board, task: &'a Task) -> Option<&'a TaskId> {
    task.deps.iter().find(|d| {
        board
            .tasks
            .get(*d)
            .is_some_and(|t| t.status == TaskStatus::Decomposed)
            && dep_targets(board, d).is_empty()
    })
}

/// Tasks still to be built, or blocked: those a dependency cycle can hold back forever (a
/// done or accepted task satisfies its dependents, so it breaks any cycle it is on).
fn waiting(task: &Task) -> bool {
    matches!(task.status, TaskStatus::Pending | TaskStatus::Blocked)
}

/// Every waiting task on a dependency cycle, with one cycle through it, in order, each
/// depending on the next and the first repeated at the end (`t-1 -> t-2 -> t-1`).
///
/// Linear in the board when there is no cycle: tasks that depend on nothing waiting, or
/// that nothing waiting depends on, are peeled off first (what is left is, in practice,
/// the cycles alone), and only the rest is searched.
pub fn cycles(board: &Board) -> Vec<(TaskId, Vec<TaskId>)> {
    let graph = WaitGraph::of(board);
    let left = graph.cyclic_core();
    left.iter()
        .filter_map(|&v| Some((graph.ids[v].clone(), graph.cycle_through(v, &left)?)))
        .collect()
}

/// The dependency graph of the waiting tasks: `deps[v]` are the waiting tasks `v` depends
/// on, each once.
struct WaitGraph {
    ids: Vec<TaskId>,
    deps: Vec<Vec<usize>>,
    dependents: Vec<Vec<usize>>,
}

impl WaitGraph {
    fn of(board: &Board) -> WaitGraph {
        let tasks: Vec<&Task> = board.tasks.values().filter(|t| waiting(t)).collect();
        let index: HashMap<&TaskId, usize> =
            tasks.iter().enumerate().map(|(i, t)| (&t.id, i)).collect();
        let mut deps = vec![Vec::new(); tasks.len()];
        let mut dependents = vec![Vec::new(); tasks.len()];
        for (v, task) in tasks.iter().enumerate() {
            let mut seen = HashSet::new();
            for &d in task.deps.iter().filter_map(|d| index.get(d)) {
                if seen.insert(d) {
                    deps[v].push(d);
                    dependents[d].push(v);
                }
            }
        }
        WaitGraph {
            ids: tasks.iter().map(|t| t.id.clone()).collect(),
            deps,
            dependents,
        }
    }

    /// The tasks left after peeling off, again and again, those with no dependency left and
    /// those no task left depends on: every task on a cycle is among them.
    fn cyclic_core(&self) -> HashSet<usize> {
        let mut left: HashSet<usize> = (0..self.ids.len()).collect();
        for (edges, back) in [
            (&self.deps, &self.dependents),
            (&self.dependents, &self.deps),
        ] {
            let mut count: Vec<usize> = (0..self.ids.len())
                .map(|v| edges[v].iter().filter(|w| left.contains(w)).count())
                .collect();
            let mut free: VecDeque<usize> =
                left.iter().copied().filter(|&v| count[v] == 0).collect();
            while let Some(v) = free.pop_front() {
                left.remove(&v);
                for &w in &back[v] {
                    if left.contains(&w) {
                        count[w] -= 1;
                        if count[w] == 0 {
                            free.push_back(w);
                        }
                    }
                }
            }
        }
        left
    }

    /// A shortest cycle through `v` among `left` (breadth first along dependencies), as ids.
    fn cycle_through(&self, v: usize, left: &HashSet<usize>) -> Option<Vec<TaskId>> {
        let mut came_from: HashMap<usize, usize> = HashMap::new();
        let mut queue = VecDeque::from([v]);
        while let Some(u) = queue.pop_front() {
            for &w in &self.deps[u] {
                if w == v {
                    let mut path = vec![u];
                    while let Some(&p) = came_from.get(path.last()?) {
                        path.push(p);
                    }
                    // `path` runs from u back to v; the cycle runs from v to u, then v.
                    path.reverse();
                    path.push(v);
                    return Some(path.into_iter().map(|i| self.ids[i].clone()).collect());
                }
                if left.contains(&w) && !came_from.contains_key(&w) {
                    came_from.insert(w, u);
                    queue.push_back(w);
                }
            }
        }
        None
    }
}

/// `t-1 -> t-2 -> t-1`.
pub fn cycle_text(cycle: &[TaskId]) -> String {
    let ids: Vec<&str> = cycle.iter().map(TaskId::as_str).collect();
    format!("dependency cycle: {}", ids.join(" -> "))
}

/// Every task on `board` that must not be built as it stands, with why: the waiting tasks
/// on a dependency cycle, depending on a task that is not on the board or on a decomposed
/// task with no subtask, and the tasks still to be built or verified whose id cannot name
/// a git branch or folder. Blocked tasks are left as they are (they already wait for a
/// person). In board order. Dependencies on decomposed tasks with subtasks are expected to
/// be rewired first ([`rewired_deps`]).
pub fn unsound(board: &Board) -> Vec<(TaskId, String)> {
    let cycles: HashMap<TaskId, Vec<TaskId>> = cycles(board).into_iter().collect();
    board
        .tasks
        .values()
        .filter(|t| matches!(t.status, TaskStatus::Pending | TaskStatus::Done))
        .filter_map(|task| {
            let reason = if let Some(why) = id_problem(task.id.as_str()) {
                format!(
                    "its id cannot name a git branch or folder ({why}); unblocking it gives it \
                     a new id"
                )
            } else if task.status == TaskStatus::Done {
                // Built already: what it depended on no longer matters.
                return None;
            } else if let Some(cycle) = cycles.get(&task.id) {
                cycle_text(cycle)
            } else if let Some(dep) = decomposed_into_nothing(board, task) {
                format!(
                    "depends on {dep}, which was decomposed and has no subtask on the board; \
                     unblocking it drops the dependency"
                )
            } else {
                let missing = missing_deps(board, task);
                let first = missing.first()?;
                format!("depends on {first}, which is not on the board")
            };
            Some((task.id.clone(), reason))
        })
        .collect()
}

/// Why `id` clashes with an id on `board` that differs from it only in ASCII case, if one
/// does: on a case-insensitive file system (macOS, Windows) their branches
/// (`ralph-task/T-1`, `ralph-task/t-1`) and work-tree folders would be one.
fn case_clash(board: &Board, id: &TaskId) -> Option<String> {
    let other = board
        .tasks
        .keys()
        .find(|other| *other != id && other.as_str().eq_ignore_ascii_case(id.as_str()))?;
    Some(format!(
        "{:?} differs from {other} only in case; their branches and folders would be one on a \
         case-insensitive file system",
        id.as_str()
    ))
}

/// Why `text`, a person's text for the board, cannot be shown as it is, if it cannot: it
/// holds a control character (C0 or C1: ESC would drive the terminal of whoever lists the
/// board, a tab or a carriage return would garble its columns). A line break is allowed
/// where the text may span lines (`multiline`).
pub fn control_problem(text: &str, multiline: bool) -> Option<String> {
    let (at, c) = text
        .char_indices()
        .find(|&(_, c)| c.is_control() && !(multiline && c == '\n'))?;
    Some(format!(
        "holds the control character U+{:04X} at byte {at}: write plain text",
        u32::from(c)
    ))
}

/// What is wrong with `task`, a person's new task for `board`, if anything: the field (as
/// `ralph task add` takes it: `id`, `name`, `accept`, `deps[0]`) and the rest of a sentence
/// saying why.
pub fn new_task_problem(board: &Board, task: &Task) -> Option<(String, String)> {
    let problem = |field: &str, why: String| Some((field.to_owned(), why));
    if let Some(why) = id_problem(task.id.as_str()) {
        return problem("id", why);
    }
    if let Some(why) = case_clash(board, &task.id) {
        return problem("id", why);
    }
    if task.name.trim().is_empty() {
        return problem("name", "is empty".to_owned());
    }
    if task.name.contains(['\n', '\r']) {
        return problem("name", "holds a line break; a name is one line".to_owned());
    }
    if let Some(why) = control_problem(&task.name, false) {
        return problem("name", why);
    }
    if task.acceptance.trim().is_empty() {
        return problem(
            "accept",
            "is empty: say what the verifier checks the work against".to_owned(),
        );
    }
    for (field, text) in [("accept", &task.acceptance), ("notes", &task.notes)] {
        if let Some(why) = control_problem(text, true) {
            return problem(field, why);
        }
    }
    for (i, dep) in task.deps.iter().enumerate() {
        if let Some(why) = new_dep_problem(board, task, dep) {
            return problem(&format!("deps[{i}]"), why);
        }
    }
    None
}

/// Why `task`, a person's new task for `board`, cannot depend on `dep`, if it cannot: it is
/// the task itself, not on the board, decomposed (its subtasks are named instead), or
/// waiting on the task in turn.
fn new_dep_problem(board: &Board, task: &Task, dep: &TaskId) -> Option<String> {
    if *dep == task.id {
        return Some(format!("names the task itself ({dep}): a dependency cycle"));
    }
    let Some(found) = board.tasks.get(dep) else {
        return Some(format!("names {dep}, which is not on the board"));
    };
    if found.status == TaskStatus::Decomposed {
        let subtasks: Vec<&str> = board
            .tasks
            .values()
            .filter(|t| t.parent.as_ref() == Some(dep))
            .map(|t| t.id.as_str())
            .collect();
        return Some(format!(
            "names {dep}, which was decomposed: name its subtasks ({})",
            subtasks.join(", ")
        ));
    }
    if waiting(found) && leads_to(board, found, &task.id) {
        return Some(format!(
            "names {dep}, which depends on {} in turn: a dependency cycle",
            task.id
        ));
    }
    None
}

/// The dependencies of `task` that can never be met as the board stands: tasks not on it,
/// decomposed tasks with no subtask on it, and waiting tasks that depend on `task` in turn
/// (directly or through others).
pub fn unmeetable_deps(board: &Board, task: &Task) -> Vec<TaskId> {
    task.deps
        .iter()
        .filter(|d| match board.tasks.get(*d) {
            None => true,
            Some(dep) if dep.status == TaskStatus::Decomposed => dep_targets(board, d).is_empty(),
            Some(dep) => waiting(dep) && leads_to(board, dep, &task.id),
        })
        .cloned()
        .collect()
}

/// Whether `to` is among the waiting tasks `from` depends on, directly or through others.
fn leads_to(board: &Board, from: &Task, to: &TaskId) -> bool {
    let mut seen: HashSet<&TaskId> = HashSet::new();
    let mut stack: Vec<&Task> = vec![from];
    while let Some(task) = stack.pop() {
        for dep in &task.deps {
            if dep == to {
                return true;
            }
            if seen.insert(dep)
                && let Some(next) = board.tasks.get(dep).filter(|t| waiting(t))
            {
                stack.push(next);
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Change;

    fn board(tasks: Vec<Task>) -> Board {
        let mut b = Board::new();
        b.apply_all(tasks.into_iter().map(Change::Task));
        b
    }

    #[test]
    fn ids_from_the_safe_alphabet_pass_and_others_say_why() {
        for good in ["t-1", "t-3a", "T_9.b", "a"] {
            assert_eq!(id_problem(good), None, "{good}");
        }
        let long = "x".repeat(MAX_ID_LEN + 1);
        for bad in [
            "",
            "has space",
            "../../../escape",
            ".hidden",
            "-flag",
            "a..b",
            "t-1.",
            "t-1.lock",
            "t/1",
            "é",
            long.as_str(),
        ] {
            assert!(id_problem(bad).is_some(), "{bad:?} passed");
        }
    }

    #[test]
    fn a_cycle_is_found_through_each_of_its_tasks_and_nothing_else() {
        let b = board(vec![
            Task::new("t-1", "a").with_deps(["t-2"]),
            Task::new("t-2", "b").with_deps(["t-3"]),
            Task::new("t-3", "c").with_deps(["t-1"]),
            // Waits on the cycle, and is not on it.
            Task::new("t-4", "d").with_deps(["t-1"]),
            Task::new("t-5", "e").with_deps(["t-5"]),
            // A done task breaks the cycle it would close.
            Task::new("t-6", "f").with_deps(["t-7"]),
            Task::new("t-7", "g")
                .with_deps(["t-6"])
                .with_status(TaskStatus::Done),
        ]);
        let found: HashMap<String, String> = cycles(&b)
            .into_iter()
            .map(|(id, c)| (id.to_string(), cycle_text(&c)))
            .collect();
        assert_eq!(found.len(), 4, "{found:?}");
        assert_eq!(found["t-1"], "dependency cycle: t-1 -> t-2 -> t-3 -> t-1");
        assert_eq!(found["t-3"], "dependency cycle: t-3 -> t-1 -> t-2 -> t-3");
        assert_eq!(found["t-5"], "dependency cycle: t-5 -> t-5");
    }

    #[test]
    fn a_task_between_two_cycles_is_not_on_either() {
        let b = board(vec![
            Task::new("a1", "x").with_deps(["a2"]),
            Task::new("a2", "x").with_deps(["a1", "m"]),
            Task::new("m", "x").with_deps(["b1"]),
            Task::new("b1", "x").with_deps(["b2"]),
            Task::new("b2", "x").with_deps(["b1"]),
        ]);
        let on: HashSet<String> = cycles(&b)
            .into_iter()
            .map(|(id, _)| id.to_string())
            .collect();
        assert_eq!(on, ["a1", "a2", "b1", "b2"].map(String::from).into());
    }

    #[test]
    fn unsound_names_the_first_problem_of_each_task_to_build() {
        let mut blocked = Task::new("t-9", "x").with_deps(["t-9"]);
        blocked.status = TaskStatus::Blocked;
        let b = board(vec![
            Task::new("t-1", "ok"),
            Task::new("t-2", "x").with_deps(["t-99"]),
            Task::new("has space", "x"),
            blocked,
        ]);
        let found = unsound(&b);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].1, "depends on t-99, which is not on the board");
        assert!(
            found[1].1.starts_with("its id cannot name"),
            "{}",
            found[1].1
        );
    }

    #[test]
    fn a_dependency_on_a_decomposed_task_stands_for_its_subtasks_in_turn() {
        let sub = |id: &str, parent: &str| {
            let mut task = Task::new(id, id);
            task.parent = Some(parent.into());
            task
        };
        let b = board(vec![
            Task::new("t-3", "x").with_status(TaskStatus::Decomposed),
            sub("t-3a", "t-3").with_status(TaskStatus::Decomposed),
            sub("t-3aa", "t-3a"),
            sub("t-3b", "t-3"),
            Task::new("t-8", "x").with_status(TaskStatus::Decomposed),
            Task::new("t-4", "x").with_deps(["t-3b", "t-3", "t-8"]),
        ]);
        let ids = |list: &[&str]| list.iter().map(|s| TaskId::new(*s)).collect::<Vec<_>>();
        assert_eq!(dep_targets(&b, &"t-3".into()), ids(&["t-3aa", "t-3b"]));
        assert_eq!(dep_targets(&b, &"t-3b".into()), ids(&["t-3b"]));
        assert!(dep_targets(&b, &"t-8".into()).is_empty());
        // Each once; the one decomposed into nothing stays, for `unsound` to block.
        let t4 = &b.tasks["t-4"];
        assert_eq!(rewired_deps(&b, t4), Some(ids(&["t-3b", "t-3aa", "t-8"])));
        assert_eq!(rewired_deps(&b, &b.tasks["t-3b"]), None);
        assert_eq!(unmeetable_deps(&b, t4), ids(&["t-8"]));
    }

    #[test]
    fn unmeetable_deps_are_the_missing_ones_and_those_leading_back() {
        let b = board(vec![
            Task::new("t-1", "x").with_deps(["t-2", "t-3", "t-99"]),
            Task::new("t-2", "x").with_deps(["t-1"]),
            Task::new("t-3", "x"),
        ]);
        let deps = unmeetable_deps(&b, &b.tasks["t-1"]);
        assert_eq!(deps, [TaskId::new("t-2"), TaskId::new("t-99")]);
    }
}
