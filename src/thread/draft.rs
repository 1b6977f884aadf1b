//! Drafting as a conversation (seed 001): the person talks with a read-only agent about the
//! thread's spec. Each message and each reply is a [`Turn`] appended to the thread's
//! conversation log, `threads/<id>/spec/conversation.jsonl` (one JSON object per line,
//! fsynced before the call goes on). A reply may carry a revised spec: ralph then writes it
//! as the next revision (`spec/v<N+1>.md`), as [`Thread::edit_spec`] would. The agent never
//! writes a file; finalizing stays the person's call.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::phase::PhaseKind;
use super::record::Turn;
use super::spec::ThreadSpec;
use super::{ThreadError, ThreadRecord, Threads};
use crate::agent::Role;
use crate::answer::Answer;

/// How many earlier turns the agent is shown; older ones stay in the log.
const TURNS_SHOWN: usize = 20;

/// How much of one earlier turn the agent is shown, in bytes.
const TURN_SHOWN_BYTES: usize = 4 * 1024;

/// The agent's answer in the conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DraftAnswer {
    /// What the agent says to the person: answers, questions, what it changed and why.
    pub reply: String,
    /// The whole revised spec in markdown, when the agent changes it; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
}

impl Answer for DraftAnswer {
    fn check(&self) -> Result<(), String> {
        if self.reply.trim().is_empty() {
            return Err("`reply` must say something to the person".into());
        }
        if self.spec.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return Err("`spec` is empty: leave it out to keep the spec as it is".into());
        }
        Ok(())
    }
}

impl Threads {
    /// See [`Thread::discuss`].
    pub(crate) async fn discuss(&self, id: &str, message: &str) -> Result<Turn, ThreadError> {
        let mut record = self.get(id)?;
        if record.phase.kind() != PhaseKind::Drafting {
            return Err(Self::wrong_phase(
                &record,
                "discussing the spec",
                "Drafting",
            ));
        }
        let earlier = self.conversation(id)?;
        let said = Turn::new("person", message, record.spec_version);
        self.append_turn(id, &said)?;
        let prompt = self.draft_prompt(&record, &earlier, message)?;
        let (answer, run_id) = self
            .ask::<DraftAnswer>(&mut record, Role::Draft, prompt, |reason| {
                ThreadError::Discussion {
                    id: id.to_owned(),
                    reason,
                }
            })
            .await?;
        let current = self.spec_text(&record)?;
        let revised = answer
            .spec
            .filter(|spec| spec.trim() != current.trim())
            .map(|spec| self.write_spec(&mut record, &spec))
            .transpose()?
            .is_some();
        self.save(&mut record)?;
        let mut reply = Turn::new("agent", &answer.reply, record.spec_version);
        reply.revised = revised;
        reply.run_id = Some(run_id);
        self.append_turn(id, &reply)?;
        Ok(reply)
    }

    /// See [`Thread::conversation`].
    pub(crate) fn conversation(&self, id: &str) -> Result<Vec<Turn>, ThreadError> {
        let path = self.conversation_path(id);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(ThreadError::Io { path, error }),
        };
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        whole
            .lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .map(|(n, line)| {
                serde_json::from_str(line).map_err(|e| ThreadError::Corrupt {
                    path: path.clone(),
                    message: format!("line {}: {e}", n + 1),
                })
            })
            .collect()
    }

    /// See [`Thread::conversation_path`].
    pub(crate) fn conversation_path(&self, id: &str) -> PathBuf {
        self.thread_dir(id).join("spec").join("conversation.jsonl")
    }

    fn append_turn(&self, id: &str, turn: &Turn) -> Result<(), ThreadError> {
        let path = self.conversation_path(id);
        let io = |error| ThreadError::Io {
            path: path.clone(),
            error,
        };
        let mut line = serde_json::to_string(turn).map_err(|e| io(e.into()))?;
        line.push('\n');
        crate::files::journal::append(&path, line.as_bytes()).map_err(io)
    }

    fn draft_prompt(
        &self,
        record: &ThreadRecord,
        earlier: &[Turn],
        message: &str,
    ) -> Result<String, ThreadError> {
        let spec_text = self.spec_text(record)?;
        let problems: Vec<String> = ThreadSpec::parse(&spec_text)
            .err()
            .map(|e| e.to_string())
            .into_iter()
            .collect();
        let shown = &earlier[earlier.len().saturating_sub(TURNS_SHOWN)..];
        let turns: Vec<serde_json::Value> = shown
            .iter()
            .map(|t| serde_json::json!({"by": t.by, "text": cut(&t.text, TURN_SHOWN_BYTES)}))
            .collect();
        Ok(self.ctx.prompts.render(
            "thread_draft",
            &serde_json::json!({
                "spec": {"name": record.title, "text": spec_text},
                "title": record.title,
                "spec_version": record.spec_version,
                "problems": problems,
                "turns": turns,
                "earlier": earlier.len() - shown.len(),
                "message": message,
            }),
        )?)
    }
}

/// `text` cut to at most `max` bytes at a character boundary, marked when cut.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… (cut)", &text[..end])
}
