//! The shape of one stdout line, as far as ralph reads it.
//!
//! Line kinds share field names (`message` is an object on `assistant` lines and a string on
//! `permission_denied` lines) and field order varies, so a line is read in one pass into a
//! single struct holding every field any kind uses; the parser dispatches on `type` afterwards.
//! Unknown fields are skipped by serde without being built, and every field is lenient (see
//! [`lenient`](super::lenient)), so drift in the CLI's output never rejects a line.

use serde::Deserialize;

use super::lenient::{Entries, Flag, Float, List, Num, Obj, Status, Str, StrOrObj};

/// Every field ralph reads, of every line kind.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Line<'a> {
    /// `system`, `assistant`, `user`, `result`, `stream_event`, `rate_limit_event`, …
    #[serde(borrow, rename = "type")]
    pub(super) kind: Str<'a>,
    #[serde(borrow)]
    pub(super) subtype: Str<'a>,
    #[serde(borrow)]
    pub(super) session_id: Str<'a>,
    /// `system/init`: the model in use.
    #[serde(borrow)]
    pub(super) model: Str<'a>,
    /// `assistant`/`user`: the API message; `permission_denied`: the refusal's text.
    #[serde(borrow)]
    pub(super) message: StrOrObj<'a, Message<'a>>,
    /// Set on lines of a subagent; its usage is not the session's context.
    #[serde(borrow)]
    pub(super) parent_tool_use_id: Str<'a>,
    /// A synthetic `assistant` line that reports an API error.
    pub(super) is_api_error_message: Flag,
    /// The error class: of a synthetic API-error message, or of an `api_retry`.
    #[serde(borrow)]
    pub(super) error: Str<'a>,
    /// `result` and API-error messages: the HTTP status (null for network errors).
    pub(super) api_error_status: Status,
    /// `api_retry`.
    pub(super) attempt: Num,
    /// `permission_denied`.
    #[serde(borrow)]
    pub(super) tool_name: Str<'a>,
    #[serde(borrow)]
    pub(super) tool_use_id: Str<'a>,
    /// `system/status`: `compacting`, `requesting`, or null.
    #[serde(borrow)]
    pub(super) status: Str<'a>,
    #[serde(borrow)]
    pub(super) compact_result: Str<'a>,
    #[serde(borrow)]
    pub(super) compact_error: Str<'a>,
    /// `compact_boundary`.
    pub(super) compact_metadata: Obj<CompactMetadata>,
    /// `rate_limit_event`.
    #[serde(borrow)]
    pub(super) rate_limit_info: Obj<RateLimitInfo<'a>>,
    /// `result`: the outcome.
    pub(super) is_error: Flag,
    #[serde(borrow)]
    pub(super) result: Str<'a>,
    #[serde(borrow)]
    pub(super) terminal_reason: Str<'a>,
    #[serde(borrow)]
    pub(super) errors: List<Str<'a>>,
    pub(super) num_turns: Num,
    pub(super) duration_ms: Num,
    pub(super) total_cost_usd: Float,
    /// `result`: token sums over every call.
    pub(super) usage: Obj<TokenUsage>,
    #[serde(borrow, rename = "modelUsage")]
    pub(super) model_usage: Entries<'a, Obj<ModelUsage>>,
    #[serde(borrow)]
    pub(super) permission_denials: List<Obj<Denial<'a>>>,
    /// `result` of a `--json-schema` run. Any JSON is a valid value, so this is lenient too.
    pub(super) structured_output: Option<serde_json::Value>,
}

/// An API message (`assistant`) or a user turn (`user`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Message<'a> {
    #[serde(borrow)]
    pub(super) id: Str<'a>,
    #[serde(borrow)]
    pub(super) model: Str<'a>,
    /// One block per `assistant` line; a string on some `user` lines (then empty here).
    #[serde(borrow)]
    pub(super) content: List<Obj<Block<'a>>>,
    /// The `message_start` usage: input and cache counts are final, output is not.
    pub(super) usage: Obj<TokenUsage>,
}

/// A content block: `text`, `tool_use`, `thinking`, `tool_result`, …
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Block<'a> {
    #[serde(borrow, rename = "type")]
    pub(super) kind: Str<'a>,
    #[serde(borrow)]
    pub(super) text: Str<'a>,
    /// The tool of a `tool_use` block.
    #[serde(borrow)]
    pub(super) name: Str<'a>,
}

/// Token counts, as the API reports them.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct TokenUsage {
    pub(super) input_tokens: Num,
    pub(super) output_tokens: Num,
    pub(super) cache_read_input_tokens: Num,
    pub(super) cache_creation_input_tokens: Num,
}

/// One model's entry of `result.modelUsage`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ModelUsage {
    #[serde(rename = "contextWindow")]
    pub(super) context_window: Num,
    #[serde(rename = "inputTokens")]
    pub(super) input_tokens: Num,
}

/// `compact_boundary.compact_metadata`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct CompactMetadata {
    pub(super) pre_tokens: Num,
    pub(super) post_tokens: Num,
}

/// `rate_limit_event.rate_limit_info`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct RateLimitInfo<'a> {
    /// `allowed`, `allowed_warning`, `rejected`, …
    #[serde(borrow)]
    pub(super) status: Str<'a>,
    /// Epoch seconds.
    #[serde(rename = "resetsAt")]
    pub(super) resets_at: Float,
    /// `five_hour`, `seven_day`, …
    #[serde(borrow, rename = "rateLimitType")]
    pub(super) limit_type: Str<'a>,
}

/// One entry of `result.permission_denials`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Denial<'a> {
    #[serde(borrow)]
    pub(super) tool_name: Str<'a>,
    #[serde(borrow)]
    pub(super) tool_use_id: Str<'a>,
}
