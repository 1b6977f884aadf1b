//! A person's guidance to a run (`ralph tell`): what it says, whom it is for, and the last
//! section of every prompt of its scope.
//!
//! `ralph tell` posts to the inbox (see `inbox.rs`), so it reaches a run in progress
//! without its lock; the run takes each message into its journal, `.ralph/guidance.jsonl`,
//! before its next agent call, then deletes it from the inbox. A message taken twice (the
//! run died between the two) is one: the journal is read by id. Guidance stays until it is
//! withdrawn (`ralph tell --withdraw ID`) or its scope ends: a task's when the task is
//! accepted, a thread's when it is Done or Abandoned, the workspace's when the construct
//! loop's spec is complete or every spec of build mode is.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub(crate) use super::inbox::Told;
use super::inbox::{Inbox, InboxMessage};

/// The journal's file, in the state folder.
const JOURNAL: &str = "guidance.jsonl";

pub(crate) use super::inbox::MAX_TEXT;
/// A line of the journal.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum GuidanceLine {
    /// Guidance given.
    Told(Told),
    /// Withdrawn by a person.
    Withdrawn { id: String },
    /// Its scope ended.
    Ended { id: String },
    /// First given to an agent.
    Given { id: String },
}

/// The guidance of a workspace: its journal, and what waits in its inbox.
#[derive(Clone, Debug)]
pub(crate) struct Journal {
    state: PathBuf,
}

/// What a read of the journal found.
#[derive(Debug, Default)]
pub(crate) struct Standing {
    /// In force, oldest first.
    pub(crate) told: Vec<Told>,
    /// Ids ever used, ended or withdrawn ones included.
    ids: BTreeSet<String>,
    /// Ids given to an agent at least once.
    given: BTreeSet<String>,
}

impl Standing {
    /// The next free id, `g-<n>`.
    pub(crate) fn next_id(&self) -> String {
        let n = self
            .ids
            .iter()
            .filter_map(|id| id.strip_prefix("g-")?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        format!("g-{}", n + 1)
    }

    /// Whether `id` is in force.
    pub(crate) fn holds(&self, id: &str) -> bool {
        self.told.iter().any(|t| t.id == id)
    }
}

impl Journal {
    /// The guidance of the workspace whose state folder is `state` (`.ralph/`).
    pub(crate) fn in_state(state: &Path) -> Journal {
        Journal {
            state: state.to_path_buf(),
        }
    }

    fn path(&self) -> PathBuf {
        self.state.join(JOURNAL)
    }

    fn inbox(&self) -> Inbox {
        Inbox::in_state(&self.state)
    }

    /// The guidance in force: the journal's, and, with `pending`, what waits in the inbox
    /// (for `ralph status` and `tell`, which read without taking it in).
    pub(crate) fn standing(&self, pending: bool) -> Standing {
        let mut lines = self.lines();
        if pending {
            lines.extend(
                self.inbox()
                    .read()
                    .into_iter()
                    .filter_map(|f| match f.message {
                        Ok(message) => from_message(message),
                        Err(_) => None,
                    }),
            );
        }
        fold(lines)
    }

    /// Takes the inbox's guidance into the journal (each durably, then deleted from the
    /// inbox). Only the run holding the workspace calls it.
    pub(crate) fn take_in(&self) -> io::Result<()> {
        let inbox = self.inbox();
        for found in inbox.read() {
            let Some(line) = found.message.clone().ok().and_then(from_message) else {
                continue;
            };
            self.append(&line)?;
            inbox.remove(&found);
        }
        Ok(())
    }

    /// The guidance that reaches a call about `subject`, after taking in the inbox; each
    /// piece given for the first time is recorded so, and returned in `first`.
    pub(crate) fn for_call(&self, subject: Option<&str>) -> io::Result<ForCall> {
        self.take_in()?;
        let standing = self.standing(false);
        let told: Vec<Told> = standing
            .told
            .into_iter()
            .filter(|t| t.reaches(subject))
            .collect();
        let mut first = Vec::new();
        for t in &told {
            if !standing.given.contains(&t.id) {
                self.append(&GuidanceLine::Given { id: t.id.clone() })?;
                first.push(t.id.clone());
            }
        }
        Ok(ForCall { told, first })
    }

    /// Ends the guidance whose scope `ended` says is over: `ended(None)` for the workspace's
    /// (its spec complete), `ended(Some(t-3))` for a task's (accepted) or a thread's (Done,
    /// Abandoned). Only the run holding the workspace calls it.
    pub(crate) fn end(&self, ended: impl Fn(Option<&str>) -> bool) -> io::Result<()> {
        self.take_in()?;
        for told in self.standing(false).told {
            if ended(told.scope.as_deref()) {
                self.append(&GuidanceLine::Ended { id: told.id })?;
            }
        }
        Ok(())
    }

    fn append(&self, line: &GuidanceLine) -> io::Result<()> {
        super::inbox::append_line(&self.path(), line)
    }

    /// The journal's lines; a torn or foreign line is skipped (it holds no guidance).
    fn lines(&self) -> Vec<GuidanceLine> {
        super::inbox::read_lines(&self.path())
    }
}

/// What reaches one agent call.
#[derive(Debug, Default)]
pub(crate) struct ForCall {
    /// The guidance, oldest first.
    pub(crate) told: Vec<Told>,
    /// The ids given to an agent for the first time.
    pub(crate) first: Vec<String>,
}

impl ForCall {
    /// The prompt's last section, or nothing when no guidance reaches the call.
    pub(crate) fn section(&self) -> String {
        if self.told.is_empty() {
            return String::new();
        }
        let mut section = String::from(
            "\n\n## Guidance from a person\n\nA person steering this run said the following; \
             follow it where it does not contradict the task's acceptance criteria or the \
             gates.\n",
        );
        for told in &self.told {
            section.push_str(&format!("\n- {} ({}): {}\n", told.id, told.from, told.text));
        }
        section
    }
}

fn from_message(message: InboxMessage) -> Option<GuidanceLine> {
    match message {
        InboxMessage::Tell(told) => Some(GuidanceLine::Told(told)),
        InboxMessage::Withdraw { id, .. } => Some(GuidanceLine::Withdrawn { id }),
        InboxMessage::Stop { .. } | InboxMessage::Answer(_) => None,
    }
}

/// The guidance in force after `lines`: a piece told twice (taken in twice) is one.
fn fold(lines: Vec<GuidanceLine>) -> Standing {
    let mut standing = Standing::default();
    let mut gone = BTreeSet::new();
    for line in lines {
        match line {
            GuidanceLine::Told(told) => {
                if standing.ids.insert(told.id.clone()) {
                    standing.told.push(told);
                }
            }
            GuidanceLine::Withdrawn { id } | GuidanceLine::Ended { id } => {
                gone.insert(id);
            }
            GuidanceLine::Given { id } => {
                standing.given.insert(id);
            }
        }
    }
    standing.told.retain(|t| !gone.contains(&t.id));
    standing
}

#[cfg(test)]
mod tests {
    use super::*;

    fn told(id: &str, scope: Option<&str>) -> Told {
        Told {
            id: id.into(),
            text: format!("text of {id}"),
            from: "ana".into(),
            at: "2026-12-02T00:00:00Z".into(),
            scope: scope.map(Into::into),
        }
    }

    #[test]
    fn guidance_reaches_its_scope_once_given_and_goes_when_withdrawn() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::in_state(dir.path());
        let inbox = Inbox::in_state(dir.path());
        inbox.post(&InboxMessage::Tell(told("g-1", None))).unwrap();
        inbox
            .post(&InboxMessage::Tell(told("g-2", Some("t-3"))))
            .unwrap();
        assert_eq!(
            journal.standing(true).told.len(),
            2,
            "pending, before a run"
        );
        assert!(journal.standing(false).told.is_empty());

        let call = journal.for_call(Some("t-1")).unwrap();
        assert_eq!(call.first, ["g-1"], "only the workspace's reaches t-1");
        let call = journal.for_call(Some("t-3")).unwrap();
        assert_eq!(call.first, ["g-2"], "g-1 was given already");
        assert!(
            call.section().ends_with("- g-2 (ana): text of g-2\n"),
            "{}",
            call.section()
        );
        assert!(inbox.read().is_empty(), "taken in");

        inbox
            .post(&InboxMessage::Withdraw {
                id: "g-1".into(),
                at: "2026-12-02T00:00:01Z".into(),
            })
            .unwrap();
        let call = journal.for_call(Some("t-3")).unwrap();
        let ids: Vec<_> = call.told.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["g-2"]);
        journal
            .end(|scope| scope.is_none_or(|s| s == "t-3"))
            .unwrap();
        assert!(journal.standing(true).told.is_empty());
        assert_eq!(journal.standing(true).next_id(), "g-3");
    }

    #[test]
    fn a_message_taken_in_twice_is_one() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::in_state(dir.path());
        let inbox = Inbox::in_state(dir.path());
        let message = InboxMessage::Tell(told("g-1", None));
        inbox.post(&message).unwrap();
        journal.take_in().unwrap();
        // As if the run died after the journal's append, before the inbox's delete.
        inbox.post(&message).unwrap();
        let call = journal.for_call(None).unwrap();
        assert_eq!(call.told.len(), 1);
    }
}
