//! How many tokens a call will use, estimated from its prompt and
//! corrected from what calls really used.

use serde::Serialize;

/// Tokens a call is expected to use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Estimate {
    /// Prompt tokens.
    pub input: u32,
    /// Output tokens (at most `max_tokens`).
    pub output: u32,
}

impl Estimate {
    /// Input + output.
    pub fn total(&self) -> u32 {
        self.input.saturating_add(self.output)
    }
}

/// Chars-per-token estimate that corrects itself from actual usage.
pub(super) struct Estimator {
    pub chars_per_token: f64,
    pub threshold: f64,
    pub window: u32,
    pub seen: u32,
    pub ratio_sum: f64,
}

impl Estimator {
    pub fn estimate(&self, prompt_chars: usize, max_tokens: u32) -> Estimate {
        Estimate {
            input: ((prompt_chars as f64 / self.chars_per_token).ceil() as u32).max(1),
            output: max_tokens,
        }
    }

    pub fn observe(&mut self, estimated: u32, actual: u32) -> Option<(f64, f64)> {
        if estimated == 0 || actual == 0 {
            return None;
        }
        self.ratio_sum += estimated as f64 / actual as f64;
        self.seen += 1;
        if self.seen < self.window {
            return None;
        }
        let mean = self.ratio_sum / self.seen as f64;
        self.seen = 0;
        self.ratio_sum = 0.0;
        if (mean - 1.0).abs() > self.threshold {
            let old = self.chars_per_token;
            self.chars_per_token = (old * mean).clamp(0.25, 32.0);
            Some((old, self.chars_per_token))
        } else {
            None
        }
    }
}
