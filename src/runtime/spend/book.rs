//! Which ledger lines count, and what they add up to: one figure per agent run and scope.
//!
//! A scope's lines count from its last `reset` line on. An agent run counts once: by its
//! final line when it has one, else by its last provisional line (an estimate: the run was
//! cut short). Lines without a run id (older ledgers, `restored` lines) each count.

use std::collections::{BTreeMap, HashMap};

use super::{Line, Spent};

/// The lines that count, in file order.
pub(super) fn counted(lines: impl IntoIterator<Item = Line>) -> Vec<Line> {
    let mut kept: Vec<Option<Line>> = Vec::new();
    // Where each run's line is in `kept`.
    let mut runs: HashMap<String, usize> = HashMap::new();
    for line in lines {
        if line.reset {
            for slot in &mut kept {
                if slot.as_ref().is_some_and(|l| l.scope == line.scope) {
                    *slot = None;
                }
            }
            runs.retain(|_, at| kept[*at].is_some());
            continue;
        }
        let Some(run) = line.run.clone() else {
            kept.push(Some(line));
            continue;
        };
        match runs.get(&run) {
            // A run's final line is its last: anything after it is not ralph's.
            Some(&at) if kept[at].as_ref().is_some_and(|l| !l.estimate) => {}
            Some(&at) => kept[at] = Some(line),
            None => {
                runs.insert(run, kept.len());
                kept.push(Some(line));
            }
        }
    }
    kept.into_iter().flatten().collect()
}

/// Every scope's spend, from the lines that count.
pub(super) fn by_scope<'a>(lines: impl IntoIterator<Item = &'a Line>) -> BTreeMap<String, Spent> {
    let mut scopes: BTreeMap<String, Spent> = BTreeMap::new();
    for line in lines {
        scopes.entry(line.scope.clone()).or_default().add(line);
    }
    scopes
}

/// One scope's spend as a running ledger keeps it: the lines done, and the provisional
/// lines of the runs still going on in this process (each replaced by the run's next line).
#[derive(Clone, Debug, Default)]
pub(super) struct Tally {
    done: Spent,
    open: HashMap<String, Line>,
}

impl Tally {
    /// The tallies of the lines that count; the lines of the runs in `open` stay open.
    pub(super) fn of(lines: &[Line], open: &[String]) -> BTreeMap<String, Tally> {
        let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
        for line in lines {
            tallies
                .entry(line.scope.clone())
                .or_default()
                .take(line.clone(), open);
        }
        tallies
    }

    /// The scope's spend: what is done and the runs going on.
    pub(super) fn spent(&self) -> Spent {
        let mut spent = self.done;
        for line in self.open.values() {
            spent.add(line);
        }
        spent
    }

    /// The runs going on.
    pub(super) fn open_runs(&self) -> impl Iterator<Item = &String> {
        self.open.keys()
    }

    /// Counts `line`: a reset empties the tally, a run's provisional line replaces its last,
    /// its final line closes it.
    pub(super) fn push(&mut self, line: Line) {
        self.take(line, &[]);
    }

    fn take(&mut self, line: Line, open: &[String]) {
        if line.reset {
            *self = Tally::default();
            return;
        }
        match &line.run {
            Some(run) if line.estimate || open.contains(run) => {
                self.open.insert(run.clone(), line);
            }
            Some(run) => {
                self.open.remove(run);
                self.done.add(&line);
            }
            None => self.done.add(&line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(scope: &str, run: Option<&str>, estimate: bool, cost: f64) -> Line {
        Line {
            scope: scope.into(),
            run: run.map(str::to_owned),
            estimate,
            input_tokens: 10,
            cost_usd: Some(cost),
            ..Line::default()
        }
    }

    #[test]
    fn a_run_counts_by_its_final_line_else_by_its_last_provisional_one() {
        let lines = vec![
            line("construct", Some("r1"), true, 0.1),
            line("construct", Some("r1"), true, 0.2),
            line("construct", Some("r1"), false, 0.3),
            line("construct", Some("r2"), true, 0.1),
            line("construct", Some("r2"), true, 0.4),
            line("build", None, false, 1.0),
        ];
        let counted = counted(lines);
        let scopes = by_scope(&counted);
        let construct = scopes["construct"];
        assert!((construct.cost_usd - 0.7).abs() < 1e-9, "{construct:?}");
        assert_eq!((construct.runs, construct.estimated_runs), (2, 1));
        assert_eq!(construct.input_tokens, 20);
        assert_eq!(scopes["build"].runs, 1);
    }

    #[test]
    fn a_reset_drops_the_scopes_lines_and_its_open_runs() {
        let reset = Line {
            scope: "construct".into(),
            reset: true,
            ..Line::default()
        };
        let lines = vec![
            line("construct", Some("r1"), true, 0.1),
            line("build", Some("r2"), true, 0.1),
            reset,
            line("construct", Some("r3"), false, 0.5),
        ];
        let scopes = by_scope(&counted(lines));
        assert_eq!(scopes["construct"].runs, 1);
        assert!((scopes["construct"].cost_usd - 0.5).abs() < 1e-9);
        assert_eq!(scopes["build"].estimated_runs, 1);
    }

    #[test]
    fn a_tally_replaces_a_runs_provisional_line_and_closes_it() {
        let mut tally = Tally::default();
        tally.push(line("construct", Some("r1"), true, 0.1));
        tally.push(line("construct", Some("r1"), true, 0.2));
        assert_eq!(tally.spent().estimated_runs, 1);
        assert!((tally.spent().cost_usd - 0.2).abs() < 1e-9);
        tally.push(line("construct", Some("r1"), false, 0.3));
        let spent = tally.spent();
        assert_eq!((spent.runs, spent.estimated_runs), (1, 0));
        assert!((spent.cost_usd - 0.3).abs() < 1e-9);
    }
}
