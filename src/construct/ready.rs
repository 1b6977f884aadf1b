//! The order BUILD takes tasks in.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::model::{Board, Priority, Task, TaskId};

/// Buildable tasks whose dependencies are finished, in the prioritizer's order (its rank);
/// tasks it has not ranked after, highest priority first, then by creation order. Finishing a task releases its dependents, so
/// each pick costs O(log n) instead of a scan of the board.
pub(crate) struct ReadyQueue {
    heap: BinaryHeap<(Reverse<u32>, Priority, Reverse<usize>, TaskId)>,
    waiting: HashMap<TaskId, usize>,
    dependents: HashMap<TaskId, Vec<TaskId>>,
    keys: HashMap<TaskId, (Reverse<u32>, Priority, Reverse<usize>)>,
}

impl ReadyQueue {
    pub(crate) fn new(board: &Board) -> Self {
        let mut queue = ReadyQueue {
            heap: BinaryHeap::new(),
            waiting: HashMap::new(),
            dependents: HashMap::new(),
            keys: HashMap::new(),
        };
        for (index, task) in board.tasks.values().enumerate() {
            if !task.is_buildable() {
                continue;
            }
            let key = (
                Reverse(task.rank.unwrap_or(u32::MAX)),
                task.effective_priority(),
                Reverse(index),
            );
            let unmet: Vec<&TaskId> = task
                .deps
                .iter()
                .filter(|d| !board.tasks.get(*d).is_some_and(Task::is_finished))
                .collect();
            for dep in &unmet {
                queue
                    .dependents
                    .entry((*dep).clone())
                    .or_default()
                    .push(task.id.clone());
            }
            if unmet.is_empty() {
                queue.heap.push((key.0, key.1, key.2, task.id.clone()));
            } else {
                queue.waiting.insert(task.id.clone(), unmet.len());
                queue.keys.insert(task.id.clone(), key);
            }
        }
        queue
    }

    pub(crate) fn pop(&mut self) -> Option<TaskId> {
        self.heap.pop().map(|(.., id)| id)
    }

    /// `id` is done: dependents with no other unmet dependency become ready.
    pub(crate) fn finished(&mut self, id: &TaskId) {
        for dependent in self.dependents.remove(id).unwrap_or_default() {
            let Some(count) = self.waiting.get_mut(&dependent) else {
                continue;
            };
            *count -= 1;
            if *count == 0 {
                self.waiting.remove(&dependent);
                if let Some((p, r, i)) = self.keys.remove(&dependent) {
                    self.heap.push((p, r, i, dependent));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Change, TaskStatus};

    #[test]
    fn ready_queue_follows_the_rank_then_priority_and_releases_dependents() {
        let mut board = Board::new();
        // The prioritizer put the low-priority docs first: its order wins.
        let mut low = Task::new("t-1", "docs").with_priority(Priority::Low);
        low.rank = Some(0);
        let mut b = Task::new("t-2", "b");
        b.rank = Some(2);
        let mut c = Task::new("t-3", "c");
        c.rank = Some(1);
        let waits = Task::new("t-4", "d")
            .with_deps(["t-1"])
            .with_priority(Priority::High);
        let done = Task::new("t-5", "e").with_status(TaskStatus::Done);
        // Not ranked yet: after the ranked ones, by priority.
        let unranked_low = Task::new("t-6", "f").with_priority(Priority::Low);
        let unranked_high = Task::new("t-7", "g").with_priority(Priority::High);
        board.apply_all(
            [low, b, c, waits, done, unranked_low, unranked_high]
                .into_iter()
                .map(Change::Task),
        );
        let mut q = ReadyQueue::new(&board);
        assert_eq!(q.pop().unwrap(), "t-1");
        assert_eq!(q.pop().unwrap(), "t-3");
        assert_eq!(q.pop().unwrap(), "t-2");
        assert_eq!(q.pop().unwrap(), "t-7");
        assert_eq!(q.pop().unwrap(), "t-6");
        assert!(q.pop().is_none());
        q.finished(&TaskId::new("t-1"));
        assert_eq!(q.pop().unwrap(), "t-4");
    }
}
