//! Throughput of the default prioritizer on generated dependency graphs.
//!
//! Run with `cargo bench --bench prioritize`.

use divan::counter::ItemsCount;
use divan::{Bencher, black_box};
use ralph::model::Task;
use ralph::{CriticalPath, Prioritizer};

fn main() {
    divan::main();
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
