//! The shape of one stdout line, as far as ralph reads it.
//!
//! Line kinds share field names (`message` is an object on `assistant` lines and a string on
//! `permission_denied` lines) and field order varies, so a line is read in one pass into a
//! single struct holding every field any kind uses; the parser dispatches on `type` afterwards.
//! Unknown fields are skipped by serde without being built, and every field is lenient (see
//! [`lenient`](super::lenient)), so drift in the CLI's output never rejects a line.

use super::lenient::{ApiStatus, Entries, Flag, Float, List, Num, Obj, Str, StrOrObj, wire};

wire! {
    /// Every field ralph reads, of every line kind.
    struct StdoutLine<'a> {
        /// `system`, `assistant`, `user`, `result`, `stream_event`, `rate_limit_event`, …
        kind: Str<'a> = b"type",
        subtype: Str<'a> = b"subtype",
        session_id: Str<'a> = b"session_id",
        /// `system/init`: the model in use.
        model: Str<'a> = b"model",
        /// `assistant`/`user`: the API message; `permission_denied`: the refusal's text.
        message: StrOrObj<'a, Message<'a>> = b"message",
        /// Set on lines of a subagent; its usage is not the session's context.
        parent_tool_use_id: Str<'a> = b"parent_tool_use_id",
        /// A synthetic `assistant` line that reports an API error.
        is_api_error_message: Flag = b"is_api_error_message",
        /// The error class: of a synthetic API-error message, or of an `api_retry`.
        error: Str<'a> = b"error",
        /// `result` and API-error messages: the HTTP status (null for network errors).
        api_error_status: ApiStatus = b"api_error_status",
        /// `api_retry`.
        attempt: Num = b"attempt",
        /// `permission_denied`.
        tool_name: Str<'a> = b"tool_name",
        tool_use_id: Str<'a> = b"tool_use_id",
        /// `system/status`: `compacting`, `requesting`, or null.
        status: Str<'a> = b"status",
        compact_result: Str<'a> = b"compact_result",
        compact_error: Str<'a> = b"compact_error",
        /// `compact_boundary`.
        compact_metadata: Obj<CompactMetadata> = b"compact_metadata",
        /// `rate_limit_event`.
        rate_limit_info: Obj<RateLimitInfo<'a>> = b"rate_limit_info",
        /// `result`: the outcome.
        is_error: Flag = b"is_error",
        result: Str<'a> = b"result",
        terminal_reason: Str<'a> = b"terminal_reason",
        errors: List<Str<'a>> = b"errors",
        num_turns: Num = b"num_turns",
        duration_ms: Num = b"duration_ms",
        total_cost_usd: Float = b"total_cost_usd",
        /// `result`: token sums over every call.
        usage: Obj<TokenUsage> = b"usage",
        model_usage: Entries<'a, Obj<ModelUsage>> = b"modelUsage",
        permission_denials: List<Obj<Denial<'a>>> = b"permission_denials",
        /// `result` of a `--json-schema` run. Any JSON is a valid value, so this is lenient too.
        structured_output: Option<serde_json::Value> = b"structured_output",
    }
}

wire! {
    /// An API message (`assistant`) or a user turn (`user`).
    struct Message<'a> {
        id: Str<'a> = b"id",
        model: Str<'a> = b"model",
        /// One block per `assistant` line; a string on some `user` lines (then empty here).
        content: List<Obj<Block<'a>>> = b"content",
        /// The `message_start` usage: input and cache counts are final, output is not.
        usage: Obj<TokenUsage> = b"usage",
    }
}

wire! {
    /// A content block: `text`, `tool_use`, `thinking`, `tool_result`, …
    struct Block<'a> {
        kind: Str<'a> = b"type",
        text: Str<'a> = b"text",
        /// The tool of a `tool_use` block.
        name: Str<'a> = b"name",
    }
}

wire! {
    /// Token counts, as the API reports them.
    struct TokenUsage {
        input_tokens: Num = b"input_tokens",
        output_tokens: Num = b"output_tokens",
        cache_read_input_tokens: Num = b"cache_read_input_tokens",
        cache_creation_input_tokens: Num = b"cache_creation_input_tokens",
    }
}

wire! {
    /// One model's entry of `result.modelUsage`.
    struct ModelUsage {
        context_window: Num = b"contextWindow",
        input_tokens: Num = b"inputTokens",
    }
}

wire! {
    /// `compact_boundary.compact_metadata`.
    struct CompactMetadata {
        pre_tokens: Num = b"pre_tokens",
        post_tokens: Num = b"post_tokens",
    }
}

wire! {
    /// `rate_limit_event.rate_limit_info`.
    struct RateLimitInfo<'a> {
        /// `allowed`, `allowed_warning`, `rejected`, …
        status: Str<'a> = b"status",
        /// Epoch seconds.
        resets_at: Float = b"resetsAt",
        /// `five_hour`, `seven_day`, …
        limit_type: Str<'a> = b"rateLimitType",
    }
}

wire! {
    /// One entry of `result.permission_denials`.
    struct Denial<'a> {
        tool_name: Str<'a> = b"tool_name",
        tool_use_id: Str<'a> = b"tool_use_id",
    }
}
