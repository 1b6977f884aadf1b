//! Throughput of the default prioritizer on generated dependency graphs, then the ratio
//! of its time at 100,000 tasks to its time at 10,000 (the target is at most 12). The ratio
//! is measured with the two sizes interleaved, round after round, so that both see the same
//! machine: divan's medians for each size are taken minutes apart, and on a shared machine
//! the load changes in between. The same ratio for a pass that only reads the input follows:
//! the 100,000 tasks do not fit the processor's caches and the 10,000 do, so even that pass
//! is not 10 times slower but more.
//!
//! Run with `cargo bench --bench prioritize`. Results: `benches/RESULTS.md`.

// A bench reports on stdout.
#![allow(clippy::print_stdout)]
// Benches write their fixtures and workspaces directly, outside any run: the rule
// that state is written through ralph-loop-process's `files` is the library's.
#![allow(clippy::disallowed_methods)]

use divan::counter::ItemsCount;
use divan::{Bencher, black_box};
use ralph::model::Task;
use ralph::{CriticalPath, Prioritizer};

/// The target: time at 100,000 tasks ÷ time at 10,000.
const TARGET_RATIO: f64 = 12.0;
/// Rounds of the interleaved measurement.
const ROUNDS: usize = 41;

fn main() {
    divan::main();
    report_ratio();
}

/// The median time of one prioritization at 10,000 and at 100,000 tasks, measured in
/// alternation, and their ratio; then the same for merely reading what any prioritizer
/// must read (each task's id, priority and dependencies, down to their text), which is the
/// floor of the ratio on this machine.
fn report_ratio() {
    let small = dag(10_000);
    let large = dag(100_000);
    let (t_small, t_large) = interleaved(&small, &large, |tasks| {
        CriticalPath::new().prioritize(black_box(tasks))
    });
    let ratio = t_large.as_secs_f64() / t_small.as_secs_f64();
    println!(
        "interleaved medians of {ROUNDS} rounds: 10,000 tasks {t_small:.2?}, 100,000 tasks {t_large:.2?}; \
         ratio {ratio:.2} (target ≤ {TARGET_RATIO}: {})",
        if ratio <= TARGET_RATIO {
            "met"
        } else {
            "MISSED"
        }
    );
    let (r_small, r_large) = interleaved(&small, &large, |tasks| read_input(black_box(tasks)));
    println!(
        "reading the input alone: 10,000 tasks {r_small:.2?}, 100,000 tasks {r_large:.2?}; ratio {:.2}",
        r_large.as_secs_f64() / r_small.as_secs_f64()
    );
}

/// The median times of `run` on `small` (ten calls a round) and on `large` (one), over
/// [`ROUNDS`] alternating rounds. Results are dropped outside the timing, as divan does.
fn interleaved<R>(
    small: &[Task],
    large: &[Task],
    run: impl Fn(&[Task]) -> R,
) -> (std::time::Duration, std::time::Duration) {
    let time = |tasks: &[Task], calls: u32| {
        let mut results = Vec::with_capacity(calls as usize);
        let started = std::time::Instant::now();
        for _ in 0..calls {
            results.push(black_box(run(tasks)));
        }
        let elapsed = started.elapsed() / calls;
        drop(results);
        elapsed
    };
    let mut times: (Vec<_>, Vec<_>) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        times.0.push(time(small, 10));
        times.1.push(time(large, 1));
    }
    times.0.sort();
    times.1.sort();
    (times.0[ROUNDS / 2], times.1[ROUNDS / 2])
}

/// A pass that reads each task's id, priority and dependencies (their text too, as
/// resolving them must) and does nothing else.
fn read_input(tasks: &[Task]) -> usize {
    tasks
        .iter()
        .map(|task| {
            let deps: usize = task.deps.iter().map(|d| d.as_str().len()).sum();
            task.id.as_str().len() + usize::from(task.priority.is_some()) + deps
        })
        .sum()
}

/// Names that exercise every text rule: small, large, low-value and plain.
const NAMES: [&str; 4] = [
    "Rename the config field",
    "Refactor the storage layer",
    "Update the README",
    "Implement the request handler for the public API",
];

/// xorshift64: a deterministic stand-in for a random number generator, so every run
/// benches the same graph.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        // Truncation is fine: the value only picks an index.
        (self.0 % bound as u64) as usize
    }
}

/// `n` tasks, each depending on up to three earlier ones (about `3n` edges; repeats and
/// the first tasks' shorter lists make it slightly fewer).
fn dag(n: usize) -> Vec<Task> {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    (0..n)
        .map(|i| {
            let deps: Vec<String> = (0..i.min(3))
                .map(|_| format!("t-{}", rng.below(i)))
                .collect();
            Task::new(format!("t-{i}"), NAMES[i % NAMES.len()]).with_deps(deps)
        })
        .collect()
}

#[divan::bench(args = [1_000, 10_000, 100_000])]
fn critical_path(bencher: Bencher<'_, '_>, n: usize) {
    let tasks = dag(n);
    bencher
        .counter(ItemsCount::new(n))
        .bench(|| CriticalPath::new().prioritize(black_box(&tasks)));
}
