//! Build mode's history of completed specs (`[planning] progress`, `PROGRESS.md` by
//! default): an append-only audit trail, one entry per completed spec, reconciled with
//! `implementation.json` rather than written once. Not to be confused with the construct
//! loop's [`ProgressStore`](crate::ProgressStore), a board people edit.
//!
//! A spec is marked completed (an atomic write of `implementation.json`) before its entry is
//! appended, so a stop in between would lose the entry. Instead of appending "the entry of
//! the spec just completed", build mode appends every missing entry: at its start and after
//! each spec. An entry is keyed by the spec id and the time it was completed, written as an
//! HTML comment under the heading (invisible when rendered):
//!
//! ```text
//! ## 2026-01-17T10:30:00Z · greeter: Greeter
//! <!-- ralph-progress {"spec":"greeter","at":"2026-01-17T10:30:00Z"} -->
//! ```
//!
//! The entry is written before the spec's commit and goes into it, so it cannot name that
//! commit: it says the commit is the one that adds it (`git log -1 -- PROGRESS.md`). Entries
//! of specs that carry a `commit` (completed by an earlier ralph, or by hand) name it, and
//! were keyed by it: those keys are still recognized.
//!
//! Entries are appended in completion order (`completedAt`, then file order), each append
//! synced; an entry already there is never written again. Entries written before the key
//! existed are recognized by their heading and `- Commit:` line. Only specs ralph completed
//! (they carry `completedAt`) get an entry: a spec marked completed by hand has no commit or
//! tasks of ralph's to report.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::runtime::error::Error;
use crate::specs::implementation::{Implementation, SpecEntry, Status};

const KEY_PREFIX: &str = "<!-- ralph-progress ";
const KEY_SUFFIX: &str = " -->";
/// What an old entry said when the spec had nothing to commit.
const NO_COMMIT: &str = "nothing to commit";
/// What an entry says of the commit it goes into.
const THIS_COMMIT: &str = "the one that adds this entry";

/// One history file.
#[derive(Debug)]
pub(crate) struct History {
    path: PathBuf,
}

impl History {
    pub(crate) fn new(path: PathBuf) -> Self {
        History { path }
    }

    /// Appends the entry of every completed spec of `plan` that the file lacks, in completion
    /// order; `plan_path` gives a spec's plan file as shown in its entry. Returns the ids of
    /// the specs whose entries were appended.
    pub(crate) fn reconcile(
        &self,
        plan: &Implementation,
        plan_path: impl Fn(&SpecEntry) -> String,
    ) -> Result<Vec<String>, Error> {
        let io = |source| Error::Io {
            path: self.path.clone(),
            source,
        };
        let text = match std::fs::read(&self.path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(io(e)),
        };
        let recorded = recorded(&text);
        let missing: Vec<&SpecEntry> = completion_order(plan)
            .into_iter()
            .filter(|s| !keys(s).iter().any(|k| recorded.contains(k)))
            .collect();
        if missing.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = if text.trim().is_empty() {
            "# Progress\n".to_owned()
        } else {
            String::new()
        };
        for spec in &missing {
            out.push_str(&entry(spec, &plan_path(spec)));
        }
        // One write for all: a stop leaves whole entries or none of this batch's tail.
        crate::files::journal::append(&self.path, out.as_bytes()).map_err(io)?;
        Ok(missing.iter().map(|s| s.id.clone()).collect())
    }
}

/// The plan file as an entry shows it: relative to the workspace when inside it.
pub(crate) fn shown(plan: &Path, workspace: &Path) -> String {
    plan.strip_prefix(workspace)
        .unwrap_or(plan)
        .display()
        .to_string()
}

/// The specs ralph completed, in completion order: by `completedAt` (parsed, so precision
/// differences do not matter), an unreadable time last, ties in file order.
fn completion_order(plan: &Implementation) -> Vec<&SpecEntry> {
    let mut done: Vec<(usize, &SpecEntry)> = plan
        .specs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.status == Status::Completed && s.completed_at.is_some())
        .collect();
    done.sort_by_key(|(i, s)| {
        let at = s.completed_at.as_deref()?.parse::<jiff::Timestamp>().ok();
        Some((at.is_none(), at, *i))
    });
    done.into_iter().map(|(_, s)| s).collect()
}

/// The keys an entry of `spec` may carry: its id with `at:` and the time it was
/// completed, or (entries of earlier versions) with its commit, empty when there was none.
fn keys(spec: &SpecEntry) -> [(String, String); 2] {
    let at = format!("at:{}", spec.completed_at.as_deref().unwrap_or_default());
    let commit = spec.commit.clone().unwrap_or_default();
    [(spec.id.clone(), at), (spec.id.clone(), commit)]
}

/// The keys of the entries in `text`: from the key comments, and from the heading and
/// `- Commit:` line of entries that have none.
fn recorded(text: &str) -> HashSet<(String, String)> {
    let mut keys = HashSet::new();
    // A leading newline so that a file starting with an entry's heading is split alike.
    for section in format!("\n{text}").split("\n## ").skip(1) {
        let found = section.lines().find_map(|l| {
            let json = l
                .trim()
                .strip_prefix(KEY_PREFIX)?
                .strip_suffix(KEY_SUFFIX)?;
            let value: serde_json::Value = serde_json::from_str(json).ok()?;
            let id = value.get("spec")?.as_str()?.to_owned();
            if let Some(at) = value.get("at").and_then(|a| a.as_str()) {
                return Some((id, format!("at:{at}")));
            }
            let commit = value.get("commit").and_then(|c| c.as_str()).unwrap_or("");
            Some((id, commit.to_owned()))
        });
        if let Some(key) = found.or_else(|| legacy_key(section)) {
            keys.insert(key);
        }
    }
    keys
}

/// `<date> · <id>: <name>` then `- Commit: <sha>`, as entries were written before the key.
fn legacy_key(section: &str) -> Option<(String, String)> {
    let heading = section.lines().next()?;
    let (_, rest) = heading.split_once(" · ")?;
    let (id, _) = rest.split_once(": ")?;
    let commit = section
        .lines()
        .find_map(|l| l.strip_prefix("- Commit: "))?
        .trim();
    let commit = if commit == NO_COMMIT { "" } else { commit };
    Some((id.to_owned(), commit.to_owned()))
}

/// One entry: heading, key, tasks, commit, plan.
fn entry(spec: &SpecEntry, plan: &str) -> String {
    let key = match &spec.commit {
        Some(commit) => serde_json::json!({"spec": spec.id, "commit": commit}),
        None => serde_json::json!({"spec": spec.id, "at": spec.completed_at}),
    };
    let mut text = format!(
        "\n## {} · {}: {}\n{KEY_PREFIX}{key}{KEY_SUFFIX}\n\n",
        spec.completed_at.as_deref().unwrap_or_default(),
        spec.id,
        spec.display_name()
    );
    text.push_str(&format!("- Tasks ({}):\n", spec.tasks.len()));
    for task in &spec.tasks {
        text.push_str(&format!("  - [x] {} {}\n", task.id, task.description));
    }
    let commit = spec.commit.as_deref().unwrap_or(THIS_COMMIT);
    text.push_str(&format!("- Commit: {commit}\n- Plan: {plan}\n"));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completed(id: &str, at: &str, commit: Option<&str>) -> SpecEntry {
        let mut spec = SpecEntry::new(id, format!("specs/{id}.md"));
        spec.status = Status::Completed;
        spec.completed_at = Some(at.to_owned());
        spec.commit = commit.map(str::to_owned);
        spec
    }

    #[test]
    fn entries_are_appended_once_in_completion_order() {
        let dir = tempfile::tempdir().unwrap();
        let md = History::new(dir.path().join("PROGRESS.md"));
        let mut plan = Implementation::default();
        // File order b, a; completion order a (whole seconds), b (milliseconds).
        plan.specs
            .push(completed("b", "2026-01-17T10:30:05.5Z", Some("bbb")));
        plan.specs
            .push(completed("a", "2026-01-17T10:30:05Z", None));
        let mut by_hand = SpecEntry::new("c", "specs/c.md");
        by_hand.status = Status::Completed;
        plan.specs.push(by_hand);
        let plan_path = |s: &SpecEntry| format!("specs/plans/{}.md", s.id);
        assert_eq!(md.reconcile(&plan, plan_path).unwrap(), ["a", "b"]);
        let first = std::fs::read_to_string(dir.path().join("PROGRESS.md")).unwrap();
        assert!(first.starts_with("# Progress\n"), "{first}");
        assert!(
            first.find("· a:").unwrap() < first.find("· b:").unwrap(),
            "{first}"
        );
        assert!(!first.contains("· c:"), "{first}");
        assert!(md.reconcile(&plan, plan_path).unwrap().is_empty());
        let again = std::fs::read_to_string(dir.path().join("PROGRESS.md")).unwrap();
        assert_eq!(again, first);
        // Completed again with a new commit: a new entry.
        plan.specs[0].commit = Some("ccc".into());
        assert_eq!(md.reconcile(&plan, plan_path).unwrap(), ["b"]);
    }

    #[test]
    fn entries_without_a_key_are_recognized_by_heading_and_commit() {
        let text = "# Progress\n\n## 2026-01-17T10:30:00Z · a: Spec a\n\n- Tasks (0):\n- Commit: abc\n- Plan: p\n\n## 2026 · b: B\n\n- Commit: nothing to commit\n";
        let keys = recorded(text);
        assert!(keys.contains(&("a".to_owned(), "abc".to_owned())));
        assert!(keys.contains(&("b".to_owned(), String::new())));
        assert_eq!(keys.len(), 2);
    }
}
