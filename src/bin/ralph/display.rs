//! What a person sees while ralph runs: one line per event (or NDJSON with timestamps), and
//! the summary at the end with the cost per task and in total.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use ralph::model::TaskStatus;
use ralph::{Event, Observer, Outcome, Ralph};

/// Prints events and adds up what the agent runs cost.
#[derive(Default)]
pub(crate) struct Lines {
    json: bool,
    /// Cost in USD by subject (task or issue id; `-` for runs without one).
    costs: Mutex<BTreeMap<String, f64>>,
    /// Input and output tokens, all runs together.
    tokens: Mutex<(u64, u64)>,
}

impl Lines {
    fn add(&self, event: &Event) {
        if let Event::AgentFinished {
            subject,
            usage,
            cost_usd,
            ..
        } = event
        {
            if let Some(cost) = cost_usd {
                let key = subject.clone().unwrap_or_else(|| "-".into());
                *self.lock_costs().entry(key).or_default() += cost;
            }
            let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
            tokens.0 += usage.input_tokens;
            tokens.1 += usage.output_tokens;
        }
    }

    fn lock_costs(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, f64>> {
        self.costs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The display for a run: plain lines, or NDJSON with `--json`.
pub(crate) fn observer(json: bool) -> Arc<Lines> {
    Arc::new(Lines {
        json,
        ..Lines::default()
    })
}

impl Observer for Lines {
    fn on_event(&self, event: &Event) {
        self.add(event);
        let mut out = std::io::stdout().lock();
        // A display that cannot print must not stop the run.
        let _ = if self.json {
            writeln!(out, "{}", json_line(event))
        } else {
            let line = event.to_string();
            // The summary says how the run ended.
            if line.is_empty() || matches!(event, Event::Finished { .. }) {
                return;
            }
            writeln!(out, "{line}")
        };
        let _ = out.flush();
    }
}

/// The event as one JSON object with an RFC 3339 `ts`.
fn json_line(event: &Event) -> serde_json::Value {
    let mut value = serde_json::to_value(event).unwrap_or_default();
    if let Some(object) = value.as_object_mut() {
        object.insert("ts".into(), jiff::Timestamp::now().to_string().into());
    }
    value
}

/// The end of a construct run: the outcome, the tasks, the cost, and what to do next.
pub(crate) async fn summary(
    ralph: &Ralph,
    lines: &Lines,
    outcome: &Outcome,
) -> Result<(), ralph::Error> {
    let board = ralph.board().await?;
    let count = |s: TaskStatus| board.tasks.values().filter(|t| t.status == s).count();
    println!("\n── summary ──");
    println!("  {outcome}");
    println!(
        "  tasks: {} accepted, {} pending, {} blocked, {} decomposed",
        count(TaskStatus::Accepted),
        count(TaskStatus::Pending),
        count(TaskStatus::Blocked),
        count(TaskStatus::Decomposed),
    );
    let (tokens_in, tokens_out) = *lines.tokens.lock().unwrap_or_else(|e| e.into_inner());
    let costs = lines.lock_costs();
    if !costs.is_empty() {
        let per_task: Vec<String> = costs.iter().map(|(s, c)| format!("{s} ${c:.4}")).collect();
        println!(
            "  cost: ${:.4} ({})",
            costs.values().sum::<f64>(),
            per_task.join(", ")
        );
    }
    println!("  tokens: {tokens_in} in, {tokens_out} out");
    if let Some(next) = crate::run::next_step(outcome) {
        println!("  next: {next}");
    }
    Ok(())
}
