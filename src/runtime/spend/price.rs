//! What a run costs by the user's `[prices]`, for an agent that reports no dollars (Codex,
//! Gemini, opencode): ralph keeps no price table of its own, since a built-in one would be
//! wrong the day a provider changes its prices, and a wrong figure is worse than "unpriced".

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::agent::Usage;

/// The prices of `[prices]`, per model: dollars per million tokens of each rate.
#[derive(Clone, Debug, Default)]
pub(crate) struct Prices(Arc<BTreeMap<String, BTreeMap<String, f64>>>);

impl Prices {
    /// The prices the config gives (already validated: `input` and `output` set).
    pub(crate) fn new(prices: &BTreeMap<String, BTreeMap<String, f64>>) -> Self {
        Prices(Arc::new(prices.clone()))
    }

    /// What `usage` of `model` cost in dollars; `None` without a price for the model.
    /// Cache reads and writes cost `input`'s rate where their own is not given.
    pub(crate) fn cost(&self, model: Option<&str>, usage: &Usage) -> Option<f64> {
        let rates = self.0.get(model?)?;
        let rate = |name: &str| rates.get(name).copied();
        let (input, output) = (rate("input")?, rate("output")?);
        let tokens = |n: u64, dollars: f64| n as f64 * dollars;
        let sum = tokens(usage.input_tokens, input)
            + tokens(
                usage.cache_read_tokens,
                rate("cached_input").unwrap_or(input),
            )
            + tokens(
                usage.cache_creation_tokens,
                rate("cache_write").unwrap_or(input),
            )
            + tokens(usage.output_tokens, output);
        Some(sum / 1_000_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, cache_read: u64, cache_creation: u64, output: u64) -> Usage {
        let mut usage = Usage::default();
        usage.input_tokens = input;
        usage.output_tokens = output;
        usage.cache_read_tokens = cache_read;
        usage.cache_creation_tokens = cache_creation;
        usage
    }

    fn prices(rates: &[(&str, f64)]) -> Prices {
        let rates = rates.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect();
        Prices::new(&BTreeMap::from([("gpt-5-codex".to_owned(), rates)]))
    }

    #[test]
    fn each_kind_of_token_costs_its_own_rate() {
        let prices = prices(&[
            ("input", 1.25),
            ("cached_input", 0.125),
            ("cache_write", 2.0),
            ("output", 10.0),
        ]);
        let cost = prices
            .cost(
                Some("gpt-5-codex"),
                &usage(1_000_000, 2_000_000, 500_000, 100_000),
            )
            .unwrap();
        assert!((cost - (1.25 + 0.25 + 1.0 + 1.0)).abs() < 1e-9, "{cost}");
    }

    #[test]
    fn cache_tokens_cost_the_input_rate_unless_priced_apart() {
        let prices = prices(&[("input", 2.0), ("output", 8.0)]);
        let cost = prices
            .cost(Some("gpt-5-codex"), &usage(0, 1_000_000, 1_000_000, 0))
            .unwrap();
        assert!((cost - 4.0).abs() < 1e-9, "{cost}");
    }

    #[test]
    fn a_model_without_a_price_or_a_run_without_a_model_is_unpriced() {
        let prices = prices(&[("input", 2.0), ("output", 8.0)]);
        assert_eq!(
            prices.cost(Some("gemini-2.5-pro"), &usage(1, 0, 0, 1)),
            None
        );
        assert_eq!(prices.cost(None, &usage(1, 0, 0, 1)), None);
        assert_eq!(
            Prices::default().cost(Some("gpt-5-codex"), &usage(1, 0, 0, 1)),
            None
        );
    }
}
