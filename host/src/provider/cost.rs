//! What a model's tokens cost ([`ModelCost`]), from the models file, applied to a response's
//! usage.

use serde::{Deserialize, Serialize};

use crate::message::Usage;

/// Prices in currency units per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCost {
    /// Input tokens.
    #[serde(default)]
    pub input: f64,
    /// Output tokens.
    #[serde(default)]
    pub output: f64,
    /// Tokens read from a prompt cache.
    #[serde(default)]
    pub cache_read: f64,
    /// Tokens written to a prompt cache.
    #[serde(default)]
    pub cache_write: f64,
}

impl ModelCost {
    /// Fills `usage.cost` from its token counts.
    pub fn apply(&self, usage: &mut Usage) {
        #[expect(
            clippy::cast_precision_loss,
            reason = "token counts far below 2^52; cost is an estimate"
        )]
        let per = |tokens: u64, price: f64| tokens as f64 * price / 1_000_000.0;
        usage.cost.input = per(usage.input, self.input);
        usage.cost.output = per(usage.output, self.output);
        usage.cost.cache_read = per(usage.cache_read, self.cache_read);
        usage.cost.cache_write = per(usage.cache_write, self.cache_write);
        usage.cost.total =
            usage.cost.input + usage.cost.output + usage.cost.cache_read + usage.cost.cache_write;
    }

    pub(super) fn check(&self) -> Result<(), String> {
        for (name, v) in [
            ("input", self.input),
            ("output", self.output),
            ("cache_read", self.cache_read),
            ("cache_write", self.cache_write),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!("cost.{name} must be a non-negative number"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_is_per_million_tokens() {
        let mut u = Usage {
            input: 2_000_000,
            output: 1_000_000,
            cache_read: 500_000,
            cache_write: 0,
            total_tokens: 3_500_000,
            ..Usage::default()
        };
        ModelCost {
            input: 3.0,
            output: 15.0,
            cache_read: 0.3,
            cache_write: 3.75,
        }
        .apply(&mut u);
        assert!((u.cost.input - 6.0).abs() < 1e-9);
        assert!((u.cost.output - 15.0).abs() < 1e-9);
        assert!((u.cost.cache_read - 0.15).abs() < 1e-9);
        assert!((u.cost.total - 21.15).abs() < 1e-9);
    }
}
