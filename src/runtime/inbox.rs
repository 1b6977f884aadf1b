//! The workspace's inbox, `.ralph/inbox/`: how a person reaches a run in progress from
//! another terminal (`ralph stop`, `ralph tell`, `ralph answer`), without the workspace's lock the run holds.
//!
//! Each message is a file of its own, written atomically (a temp file renamed into place)
//! under a name that sorts by when it was posted, so a reader sees a message whole or not
//! at all and two writers never collide. The run reads the inbox between steps, acts on a
//! message, then deletes it: a run that dies first finds it again at its next start. A
//! message meant for one run (a stop) names it by its lock note (`pid N, since T`), so a
//! stop posted to a run that has since ended never stops the next one. The sandbox keeps
//! `.ralph/` read-only to agents and their gates; the commands that post refuse to run
//! inside a run (see [`crate::steer`]).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// The inbox's folder, inside the state folder [`STATE_DIR`](super::workspace::STATE_DIR).
const INBOX_DIR: &str = "inbox";

/// The largest text a person posts (guidance, an answer): a paragraph or a page, not a
/// file.
pub(crate) const MAX_TEXT: usize = 16 * 1024;

/// The largest message read: anything bigger was not written by ralph.
const MAX_MESSAGE: u64 = 64 * 1024;

/// One message to a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum InboxMessage {
    /// Finish what is in flight, record it, and end the run (`ralph stop`).
    Stop {
        /// The run it is for: its lock note.
        run: String,
        /// When it was posted (RFC 3339).
        at: String,
    },
    /// A person's guidance (`ralph tell`).
    Tell(Told),
    /// Guidance withdrawn (`ralph tell --withdraw ID`).
    Withdraw {
        /// Its id.
        id: String,
        /// When (RFC 3339).
        at: String,
    },
    /// A person's answer to an agent's question (`ralph answer`).
    Answer(Answered),
}

/// One piece of guidance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Told {
    /// `g-<n>`.
    pub(crate) id: String,
    /// What the person said.
    pub(crate) text: String,
    /// Who: `--from NAME`, else the user's login name.
    pub(crate) from: String,
    /// When (RFC 3339).
    pub(crate) at: String,
    /// The task, spec or thread it is for (`--task t-3`, `--task SPEC`, `--thread ID`):
    /// the subject of the agent calls it reaches. `None`: the whole workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) scope: Option<String>,
}

impl Told {
    /// Whether it reaches an agent call about `subject` (a task, an issue, a thread, or
    /// none): guidance for the workspace reaches every call.
    pub(crate) fn reaches(&self, subject: Option<&str>) -> bool {
        self.scope
            .as_deref()
            .is_none_or(|scope| subject == Some(scope))
    }

    /// What `ralph status` shows: `g-1 (for t-3, from ana, 2026-…): text`.
    pub(crate) fn line(&self) -> String {
        let scope = match &self.scope {
            Some(scope) => format!("for {scope}"),
            None => "for the workspace".to_owned(),
        };
        format!(
            "{} ({scope}, from {}, {}): {}",
            self.id,
            self.from,
            self.at,
            crate::output::first_line(&self.text)
        )
    }
}

/// A person's answer to a question.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Answered {
    /// The question's id.
    pub(crate) id: String,
    /// Its subject, as `ralph answer` named it.
    pub(crate) subject: String,
    /// The answer.
    pub(crate) text: String,
    /// Who: `--from NAME`, else the user's login name.
    pub(crate) from: String,
    /// When (RFC 3339).
    pub(crate) at: String,
}

/// A message found in the inbox, or why the file there is none.
#[derive(Debug)]
pub(crate) struct Found {
    /// Its file.
    pub(crate) path: PathBuf,
    /// The message, or what is wrong with the file.
    pub(crate) message: Result<InboxMessage, String>,
}

/// `.ralph/inbox/` of a workspace.
#[derive(Clone, Debug)]
pub(crate) struct Inbox {
    dir: PathBuf,
}

impl Inbox {
    /// The inbox in a workspace's state folder, `state` (`.ralph/`).
    pub(crate) fn in_state(state: &Path) -> Inbox {
        Inbox {
            dir: state.join(INBOX_DIR),
        }
    }

    /// Posts `message`, durably: it is there, whole, when this returns.
    pub(crate) fn post(&self, message: &InboxMessage) -> io::Result<PathBuf> {
        crate::files::own::create_dir_all(&self.dir)?;
        let path = self.dir.join(next_name());
        let mut bytes = serde_json::to_vec(message).map_err(io::Error::other)?;
        bytes.push(b'\n');
        crate::files::atomic::replace(&path, &bytes)?;
        Ok(path)
    }

    /// The messages waiting, oldest first. A file that cannot be read as one is listed with
    /// why; temp files of a post in progress are not listed.
    pub(crate) fn read(&self) -> Vec<Found> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| is_message(path))
            .collect();
        paths.sort();
        paths
            .into_iter()
            .map(|path| Found {
                message: read_message(&path),
                path,
            })
            .collect()
    }

    /// Whether a stop for `run` (its lock note) is waiting. It stays in the inbox, for
    /// `ralph status` to show while the run finishes what is in flight; the stops meant for
    /// other runs are deleted: only the run holding the workspace reads its inbox, so those
    /// runs are over.
    pub(crate) fn take_stop(&self, run: &str) -> bool {
        let mut asked = false;
        for found in self.read() {
            let Ok(InboxMessage::Stop { run: to, .. }) = &found.message else {
                continue;
            };
            match to == run {
                true => asked = true,
                false => self.remove(&found),
            }
        }
        asked
    }

    /// Whether a stop for `run` is waiting, read only.
    pub(crate) fn has_stop(&self, run: &str) -> bool {
        self.read().iter().any(
            |found| matches!(&found.message, Ok(InboxMessage::Stop { run: to, .. }) if to == run),
        )
    }

    /// Deletes a message acted on (or meant for a run that is gone).
    pub(crate) fn remove(&self, found: &Found) {
        // Best effort: a message left is acted on again only where that is harmless (a stop
        // names its run, which is then over).
        let _ = std::fs::remove_file(&found.path);
    }
}

/// Appends `line` as one JSON line to the journal at `path` (`guidance.jsonl`,
/// `questions.jsonl`: where a run keeps what its inbox brought), durably.
pub(crate) fn append_line(path: &Path, line: &impl Serialize) -> io::Result<()> {
    let mut bytes = serde_json::to_vec(line).map_err(io::Error::other)?;
    bytes.push(b'\n');
    crate::files::journal::append(path, &bytes)
}

/// The lines of the journal at `path`, none when it is missing; a torn or foreign line is
/// skipped: ralph acted on none of it.
pub(crate) fn read_lines<T: serde::de::DeserializeOwned>(path: &Path) -> Vec<T> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// `<nanoseconds since the epoch>-<pid>-<n>.json`: sorts by when it was posted.
fn next_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{nanos:020}-{}-{}.json",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn is_message(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    !name.starts_with('.') && name.ends_with(".json")
}

fn read_message(path: &Path) -> Result<InboxMessage, String> {
    let len = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    if len > MAX_MESSAGE {
        return Err(format!(
            "{len} bytes, more than a message holds ({MAX_MESSAGE})"
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| format!("not a message: {e}"))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests write their fixtures directly
mod tests {
    use super::*;

    fn stop(run: &str) -> InboxMessage {
        InboxMessage::Stop {
            run: run.into(),
            at: "2026-12-02T00:00:00Z".into(),
        }
    }

    #[test]
    fn messages_come_back_in_the_order_posted_and_go_once_removed() {
        let dir = tempfile::tempdir().unwrap();
        let inbox = Inbox::in_state(dir.path());
        assert!(inbox.read().is_empty(), "no folder, no messages");
        inbox.post(&stop("a")).unwrap();
        inbox.post(&stop("b")).unwrap();
        let found = inbox.read();
        let runs: Vec<_> = found
            .iter()
            .map(|f| match f.message.as_ref().unwrap() {
                InboxMessage::Stop { run, .. } => run.clone(),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(runs, ["a", "b"]);
        inbox.remove(&found[0]);
        assert_eq!(inbox.read().len(), 1);
    }

    #[test]
    fn a_file_that_is_no_message_is_listed_with_why_and_a_temp_file_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let inbox = Inbox::in_state(dir.path());
        inbox.post(&stop("a")).unwrap();
        std::fs::write(inbox.dir.join("1-1-0.json"), "{\"kind\":\"shout\"}").unwrap();
        std::fs::write(inbox.dir.join("2-1-0.json"), vec![b' '; 70_000]).unwrap();
        std::fs::write(inbox.dir.join(".3-1-0.json.1.2.tmp"), "{").unwrap();
        let found = inbox.read();
        assert_eq!(found.len(), 3, "{found:?}");
        let errors: Vec<_> = found
            .iter()
            .filter_map(|f| f.message.clone().err())
            .collect();
        assert!(errors[0].contains("not a message"), "{errors:?}");
        assert!(
            errors[1].contains("more than a message holds"),
            "{errors:?}"
        );
    }
}
