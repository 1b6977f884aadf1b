//! What a person sees while ralph runs: one line per event (or NDJSON with timestamps), a
//! line that moves while an agent runs (on a terminal only), and the summary at the end with
//! the cost per task and in total.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ralph::agent::AgentEvent;
use ralph::model::{Board, TaskStatus};
use ralph::{Event, Observer, Outcome, Ralph};

use crate::next::{Again, Next};
use crate::out::out;

/// Prints events and adds up what the agent runs cost.
#[derive(Default)]
pub(crate) struct Console {
    json: bool,
    /// The moving line, on a terminal.
    live: Option<Live>,
    /// Cost in USD by subject (task or issue id; `-` for runs without one), of this
    /// process's runs: the moving line's "so far". The summary reads the ledger.
    costs: Mutex<BTreeMap<String, f64>>,
    /// How the run ended, when it reached an outcome (the `finished` event's message).
    ended: Mutex<Option<String>>,
    /// How its agents and gates were confined (the `finished` event's `sandbox`).
    sandbox: Mutex<Option<String>>,
}

impl Console {
    fn add(&self, event: &Event) {
        if let Event::Finished { sandbox, .. } = event
            && !sandbox.is_empty()
        {
            *self.sandbox.lock().unwrap_or_else(|e| e.into_inner()) = Some(sandbox.clone());
        }
        if let Event::Finished {
            message,
            error: None,
            ..
        } = event
        {
            *self.ended.lock().unwrap_or_else(|e| e.into_inner()) = Some(message.clone());
        }
        if let Event::AgentFinished {
            subject,
            cost_usd: Some(cost),
            ..
        } = event
        {
            let key = subject.clone().unwrap_or_else(|| "-".into());
            *self.lock_costs().entry(key).or_default() += cost;
        }
    }

    fn lock_costs(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, f64>> {
        self.costs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The display for a run: plain lines, or NDJSON with `--json`; the moving line only when
/// stdout is a terminal and plain output was not asked for (so a pipe, a log file, `NO_COLOR`
/// or `TERM=dumb` gets no escape codes).
pub(crate) fn observer(json: bool) -> Arc<Console> {
    let live = (!json && std::io::stdout().is_terminal() && !plain_wanted()).then(Live::new);
    Arc::new(Console {
        json,
        live,
        ..Console::default()
    })
}

/// Whether the person asked for plain output: `NO_COLOR` set, or a `dumb` terminal.
fn plain_wanted() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
        || std::env::var("TERM").is_ok_and(|t| t == "dumb")
}

/// The line that moves while an agent runs: what it works on, for how long, its tokens, its
/// context, and the cost so far.
struct Live {
    bar: ProgressBar,
    state: Mutex<LiveState>,
}

/// What the moving line shows besides the clock.
#[derive(Default)]
struct LiveState {
    /// `build t-1 Write the parser`, `investigate`, …
    doing: String,
    /// The running agent's input (uncached) and output tokens, and its input read from or
    /// written to the providers' caches: as the ledger counts them.
    tokens: (u64, u64),
    /// Its cache tokens, read and written.
    cached: u64,
    /// Its context in use ÷ window.
    context: Option<f64>,
    /// The agent's latest status line (`codex: Reconnecting... waiting for network (…)`),
    /// until the agent is heard working again.
    status: Option<String>,
    /// The tasks being built, in the order they started (several with
    /// `build_concurrency`).
    building: Vec<(String, String)>,
}

impl LiveState {
    /// `build t-1 Write the parser`, or `build t-1, t-2, t-3 (3 at once)`.
    fn building_line(&self) -> String {
        match self.building.as_slice() {
            [] => String::new(),
            [(task, name)] => format!("build {task} {name}"),
            many => format!(
                "build {} ({} at once)",
                many.iter()
                    .map(|(t, _)| t.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                many.len()
            ),
        }
    }

    /// The moving line's text (the clock follows it): what is done, the tokens, the
    /// context, the cost so far, and the agent's latest status line.
    fn line(&self, cost: f64) -> String {
        let context = self
            .context
            .map(|r| format!(" · context {:.0}%", r * 100.0))
            .unwrap_or_default();
        let status = self
            .status
            .as_ref()
            .map(|s| format!(" · {s}"))
            .unwrap_or_default();
        let cached = match self.cached {
            0 => String::new(),
            n => format!(" (+{n} cached)"),
        };
        format!(
            "{} · {} in{cached} / {} out{context} · ${cost:.4}{status}",
            self.doing, self.tokens.0, self.tokens.1
        )
    }

    /// `task`'s attempt is over.
    fn ended(&mut self, task: &str) {
        self.building.retain(|(t, _)| t != task);
        if !self.building.is_empty() {
            self.doing = self.building_line();
        }
    }
}

impl Live {
    fn new() -> Live {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stdout());
        bar.set_style(
            ProgressStyle::with_template("  {spinner} {msg} · {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        Live {
            bar,
            state: Mutex::new(LiveState::default()),
        }
    }

    /// Follows the events that change the line; `cost` is the total so far.
    fn follow(&self, event: &Event, cost: f64) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            Event::TaskStarted { task, name, .. } => {
                state.building.retain(|(t, _)| t != task.as_str());
                state.building.push((task.to_string(), name.clone()));
                state.doing = state.building_line();
                state.tokens = (0, 0);
                state.cached = 0;
                state.context = None;
                state.status = None;
                self.restart();
            }
            Event::TaskDone { task }
            | Event::TaskBlocked { task, .. }
            | Event::TaskKilled { task, .. }
            | Event::TaskRetry { task, .. } => state.ended(task.as_str()),
            Event::StageEntered { stage, .. } => {
                *state = LiveState {
                    doing: stage.to_string().to_lowercase(),
                    ..LiveState::default()
                };
                self.restart();
            }
            // The tokens as the ledger counts them, cache reads and writes apart; a usage
            // report's input counts them in, so it gives the context only.
            Event::Agent {
                detail: AgentEvent::Spend { usage, .. },
                ..
            } => {
                state.tokens = (usage.input_tokens, usage.output_tokens);
                state.cached = usage
                    .cache_read_tokens
                    .saturating_add(usage.cache_creation_tokens);
            }
            Event::Agent {
                detail:
                    AgentEvent::Usage {
                        context_tokens,
                        window,
                        ..
                    },
                ..
            } => {
                state.context = window
                    .filter(|w| *w > 0)
                    .map(|w| *context_tokens as f64 / w as f64);
                state.status = None;
            }
            Event::Agent {
                detail: AgentEvent::Status { agent, line },
                ..
            } => state.status = Some(format!("{agent}: {line}")),
            Event::Agent {
                detail: AgentEvent::Text { .. } | AgentEvent::ToolUse { .. },
                ..
            } => state.status = None,
            event if is_end(event) => {
                self.bar.finish_and_clear();
                return;
            }
            _ => {}
        }
        self.bar.set_message(state.line(cost));
    }

    /// A new step: the clock starts again and the spinner turns on its own.
    fn restart(&self) {
        self.bar.reset_elapsed();
        self.bar.enable_steady_tick(Duration::from_millis(200));
    }
}

impl Observer for Console {
    fn on_event(&self, event: &Event) {
        self.add(event);
        if let Some(live) = &self.live {
            let cost = self.lock_costs().values().fold(0.0, |a, b| a + b);
            live.follow(event, cost);
            let line = event.to_string();
            if !line.is_empty() && !is_end(event) {
                // Above the moving line.
                live.bar.println(line);
            }
            return;
        }
        let mut out = std::io::stdout().lock();
        // A display that cannot print must not stop the run.
        let _ = if self.json {
            writeln!(out, "{}", json_line(event))
        } else {
            let line = event.to_string();
            // The summary says how the run ended.
            if line.is_empty() || is_end(event) {
                return;
            }
            writeln!(out, "{line}")
        };
        let _ = out.flush();
    }
}

/// The event that says how a run ended: the command prints the outcome once, itself, with
/// the next step.
fn is_end(event: &Event) -> bool {
    matches!(event, Event::Finished { .. } | Event::SpecsFinished { .. })
}

/// The event as one JSON object with an RFC 3339 `ts`.
fn json_line(event: &Event) -> serde_json::Value {
    let mut value = serde_json::to_value(event).unwrap_or_default();
    if let Some(object) = value.as_object_mut() {
        object.insert("ts".into(), jiff::Timestamp::now().to_string().into());
    }
    value
}

/// A run that reached its outcome and then failed on a `required` hook: the command exits 1
/// with the hook's error, and the person still reads how the run ended (the summary is not
/// printed for a failed run). Nothing with `--json`, whose `finished` line says it.
pub(crate) fn after_hook_failure(lines: &Console, error: &ralph::Error) {
    if lines.json || !matches!(error, ralph::Error::Hook { .. }) {
        return;
    }
    if let Some(message) = lines.ended.lock().unwrap_or_else(|e| e.into_inner()).take() {
        out!("\n{message}");
    }
}

/// The end of a construct run: the outcome, the tasks, the cost, and what to do next.
pub(crate) async fn summary(
    ralph: &Ralph,
    lines: &Console,
    outcome: &Outcome,
    again: &Again,
) -> Result<(), ralph::Error> {
    let board = ralph.board().await?;
    let next = construct_next(ralph, outcome, again).await?;
    out!("\n── summary ──");
    out!("  {outcome}");
    out!("  tasks: {}", tasks_line(&board));
    spend_summary(ralph)?;
    if let Some(sandbox) = lines
        .sandbox
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
    {
        out!("  sandbox: {sandbox}");
    }
    out!("  next: {next}");
    Ok(())
}

/// The summary's count of the board's tasks by status: `1 accepted, 2 done (awaiting
/// verify), 1 pending, 0 blocked, 0 decomposed`. Tasks that passed their gates but were not
/// verified yet (a stop at the budget, an interrupt) are named, so every task is counted;
/// the `done` count is left out when there is none, as on a run that reached its end.
fn tasks_line(board: &Board) -> String {
    let count = |s: TaskStatus| board.tasks().filter(|t| t.status == s).count();
    let done = match count(TaskStatus::Done) {
        0 => String::new(),
        n => format!("{n} done (awaiting verify), "),
    };
    format!(
        "{} accepted, {done}{} pending, {} blocked, {} decomposed",
        count(TaskStatus::Accepted),
        count(TaskStatus::Pending),
        count(TaskStatus::Blocked),
        count(TaskStatus::Decomposed),
    )
}

/// The board's spend, as the ledger has it (the figure of the budget, `ralph status` and
/// the board), across resumes: in all and by subject; said to be an estimate when a run
/// cut short counts by what it had reported.
fn spend_summary(ralph: &Ralph) -> Result<(), ralph::Error> {
    let totals = ralph::Totals::read(ralph.workspace())?;
    let spent = ralph.spent("construct")?;
    let estimate = match spent.estimated_runs {
        0 => String::new(),
        n => format!(
            " — an estimate: {n} {} cut short {} by what {} reported",
            plural(n as usize, "run", "runs"),
            plural(n as usize, "counts", "count"),
            plural(n as usize, "it", "they"),
        ),
    };
    let per_subject: Vec<String> = totals
        .subjects
        .iter()
        .filter(|((scope, _), s)| scope == "construct" && s.cost_usd > 0.0)
        .map(|((_, subject), s)| format!("{subject} ${:.4}", s.cost_usd))
        .collect();
    let priced = match spent.priced_runs {
        0 => String::new(),
        n => format!(
            " — {n} {} priced by [prices]",
            plural(n as usize, "run", "runs")
        ),
    };
    if spent.cost_usd > 0.0 || spent.runs > 0 {
        out!(
            "  cost: ${:.4} ({}){priced}{estimate}",
            spent.cost_usd,
            per_subject.join(", ")
        );
    }
    out!(
        "  tokens: {} in, {} out{}",
        spent.input_tokens,
        spent.output_tokens,
        cache_note(&spent)
    );
    Ok(())
}

/// `; cache 900 read, 40 written (86% of the input read from the cache)`, or nothing when
/// no run reported cache tokens: the ledger's figures, which keep them apart from the input.
pub(crate) fn cache_note(spent: &ralph::Spent) -> String {
    if spent.cache_read_tokens == 0 && spent.cache_creation_tokens == 0 {
        return String::new();
    }
    format!(
        "; cache {} read, {} written ({:.0}% of the input read from the cache)",
        spent.cache_read_tokens,
        spent.cache_creation_tokens,
        spent.cached_percent().unwrap_or_default()
    )
}

/// What to do after a construct run that ended with `outcome`.
pub(crate) async fn construct_next(
    ralph: &Ralph,
    outcome: &Outcome,
    again: &Again,
) -> Result<Next, ralph::Error> {
    let board = ralph.board().await?;
    // What `ralph construct` with no flag runs: the workspace's setting, not this run's.
    let setting = ralph::Config::load(ralph.workspace())
        .map_or(ralph.config().max_iterations, |c| c.max_iterations);
    Ok(crate::next::after_construct(
        outcome, &board, setting, again,
    ))
}

/// The next step as the last NDJSON line of a `--json` run: `{"event": "next", "next":
/// "…", "command": "…"}`, the command alone for a script to run.
pub(crate) fn json_next(next: &Next) {
    let line = serde_json::json!({
        "event": "next",
        "next": next.to_string(),
        "command": next.command(),
        "ts": jiff::Timestamp::now().to_string(),
    });
    out!("{line}");
}

/// A dry run's report: its text, or with `--json` one JSON object on one line.
pub(crate) fn report<T: std::fmt::Display + serde::Serialize>(
    report: &T,
    json: bool,
) -> Result<(), serde_json::Error> {
    match json {
        true => out!("{}", serde_json::to_string(report)?),
        false => out!("{report}"),
    }
    Ok(())
}

/// `one` or `many`, by `n`: "1 task", "2 tasks".
pub(crate) fn plural(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 { one } else { many }
}

/// Warnings on stderr, as a run prints them (`warning: …`), for the commands without the
/// run's display: a thread's (a killed run's leftovers killed), a board edit's (`task
/// prioritize` rewiring or blocking tasks).
pub(crate) struct Warnings;

impl Observer for Warnings {
    fn on_event(&self, event: &Event) {
        if let Event::Warning { message } = event {
            eprintln!("warning: {message}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(detail: AgentEvent) -> Event {
        Event::Agent {
            subject: Some("t-1".into()),
            detail,
        }
    }

    #[test]
    fn the_moving_line_shows_the_agents_latest_status_until_it_is_heard_working() {
        let live = Live {
            bar: ProgressBar::hidden(),
            state: Mutex::new(LiveState::default()),
        };
        let status = |line: &str| {
            agent(AgentEvent::Status {
                agent: "codex".into(),
                line: line.into(),
            })
        };
        live.follow(&status("Reconnecting... waiting for network (a)"), 0.0);
        live.follow(&status("Reconnecting... waiting for network (b)"), 0.0);
        assert!(
            live.bar
                .message()
                .ends_with(" · codex: Reconnecting... waiting for network (b)"),
            "{}",
            live.bar.message()
        );
        live.follow(
            &agent(AgentEvent::ToolUse {
                name: "exec_command".into(),
            }),
            0.0,
        );
        assert!(
            !live.bar.message().contains("codex:"),
            "{}",
            live.bar.message()
        );
    }

    #[test]
    fn a_status_line_prints_with_its_agent_and_subject() {
        let line = agent(AgentEvent::Status {
            agent: "codex".into(),
            line: "Reconnecting... waiting for network".into(),
        })
        .to_string();
        assert_eq!(
            line,
            "  agent codex (t-1): Reconnecting... waiting for network"
        );
    }
}
