//! What comes out of the runner: exactly one outcome per request, with its
//! degradation metadata.

use compact_str::CompactString;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// How degraded a result is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// The full answer from the preferred path.
    None,
    /// An answer with components missing.
    Partial,
    /// An answer from a fallback model or the cache.
    Fallback,
    /// Queued; it will be re-driven when the dependency recovers.
    Deferred,
    /// No answer; the user gets a clear message.
    Failed,
}

impl Level {
    /// All levels, in summary order.
    pub const ALL: [Level; 5] = [
        Level::None,
        Level::Partial,
        Level::Fallback,
        Level::Deferred,
        Level::Failed,
    ];

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "none",
            Level::Partial => "partial",
            Level::Fallback => "fallback",
            Level::Deferred => "deferred",
            Level::Failed => "failed",
        }
    }

    /// Index into [`Level::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// One step of a request's path: a model or tool, how it went, and how
/// many tries it took. Written with symbols for people ([`fmt::Display`]:
/// `gpt-4o ✗503×3`) and in ASCII for headers ([`Hop::ascii`]:
/// `gpt-4o failed 503 x3`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hop {
    /// The model's name, or the tool's target (`tool:search`).
    pub name: CompactString,
    /// How it went.
    pub end: HopEnd,
    /// Attempts made (1 + retries).
    pub tries: u32,
}

/// How one hop went.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HopEnd {
    /// Answered.
    Ok,
    /// Answered, continuing the answer a model before it cut off.
    Resumed,
    /// Answered from the cache (a tool that failed).
    Cache,
    /// Skipped: its breaker (or its provider's) is open.
    Open,
    /// Skipped: drill mode sends it through its degradation branch.
    Drill,
    /// Skipped: no rate-limit capacity in time.
    Rate,
    /// Skipped: shed from its provider's queue (capacity short).
    Shed,
    /// Skipped: its pool and queue are full.
    Pool,
    /// Skipped: its recent latency breaks the route's SLA.
    Sla,
    /// Skipped: its API cannot carry the request (why).
    Unsupported(String),
    /// Failed, as its label says (`503`, `timeout`).
    Failed(CompactString),
    /// Answered with an invalid tool call.
    Semantic,
    /// Its stream broke after the client's had started (how).
    Cut(CompactString),
    /// Refused before it was called (a session quota, a bad call).
    Refused,
    /// Failed as the inner end says, and answered from the cache.
    Stale(Box<HopEnd>),
    /// The cache's answer, this many seconds old (the hop named `cache`).
    Age(u64),
    /// Cancelled in flight: a hedged attempt answered first.
    Outrun,
}

impl Hop {
    /// `name`, answered at the first try.
    pub fn ok(name: &str) -> Self {
        Self::new(name, HopEnd::Ok)
    }

    /// `name`, ended as `end` at the first try.
    pub fn new(name: &str, end: HopEnd) -> Self {
        Self {
            name: name.into(),
            end,
            tries: 1,
        }
    }

    /// The hop in header-safe ASCII: `gpt-4o ok`, `gpt-4o failed 503 x3`,
    /// `gpt-4o skipped open` (characters a header cannot carry left out).
    pub fn ascii(&self) -> impl fmt::Display + '_ {
        struct Ascii<'a>(&'a Hop);
        impl fmt::Display for Ascii<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.write(f, true)
            }
        }
        Ascii(self)
    }

    /// [`Hop::ascii`] written straight into `out` (no formatter between).
    pub fn push_ascii(&self, out: &mut String) {
        // Writing to a `String` cannot fail.
        let _ = self.write(out, true);
    }

    fn write(&self, f: &mut dyn fmt::Write, ascii: bool) -> fmt::Result {
        let text = |f: &mut dyn fmt::Write, s: &str| {
            if !ascii || s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
                return f.write_str(s);
            }
            s.chars()
                .filter(|c| c.is_ascii() && !c.is_ascii_control())
                .try_for_each(|c| f.write_char(c))
        };
        text(f, &self.name)?;
        f.write_char(' ')?;
        write_end(f, &self.end, ascii, &text)?;
        if self.tries > 1 && matches!(self.end, HopEnd::Ok | HopEnd::Failed(_)) {
            write!(f, "{}{}", if ascii { " x" } else { "×" }, self.tries)?;
        }
        Ok(())
    }
}

type Text<'t> = dyn Fn(&mut dyn fmt::Write, &str) -> fmt::Result + 't;

fn write_end(f: &mut dyn fmt::Write, end: &HopEnd, ascii: bool, text: &Text<'_>) -> fmt::Result {
    let (ok, failed, skipped) = if ascii {
        ("ok", "failed ", "skipped ")
    } else {
        ("✓", "✗", "")
    };
    let skip = |f: &mut dyn fmt::Write, mark: &str, what: &str| {
        f.write_str(if ascii { skipped } else { mark })?;
        f.write_str(what)
    };
    match end {
        HopEnd::Ok => f.write_str(ok),
        HopEnd::Resumed => write!(f, "{ok} resumed"),
        HopEnd::Cache => f.write_str("cache"),
        HopEnd::Open => skip(f, "⊘", "open"),
        HopEnd::Drill => skip(f, "⊘", "drill"),
        HopEnd::Rate => skip(f, "⏳", "rate"),
        HopEnd::Shed => skip(f, "⏳", "shed"),
        HopEnd::Pool => skip(f, "⏳", "pool"),
        HopEnd::Sla => skip(f, "⌛", "sla"),
        HopEnd::Outrun => f.write_str(if ascii { "cancelled outrun" } else { "⏱outrun" }),
        HopEnd::Unsupported(why) => {
            f.write_str("skipped: ")?;
            text(f, why)
        }
        HopEnd::Failed(label) => {
            f.write_str(failed)?;
            text(f, label)
        }
        HopEnd::Semantic => write!(f, "{failed}semantic"),
        HopEnd::Cut(how) => {
            write!(f, "{failed}cut ")?;
            text(f, how)
        }
        HopEnd::Refused => write!(f, "{failed}refused"),
        HopEnd::Age(secs) => write!(f, "(age {secs}s)"),
        HopEnd::Stale(why) => {
            write_end(f, why, ascii, text)?;
            f.write_str(if ascii { " -> cache" } else { " → cache" })
        }
    }
}

/// How it went, with symbols: `✗503`, `⊘open`.
impl fmt::Display for HopEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_end(f, self, false, &|f, s| f.write_str(s))
    }
}

impl fmt::Display for Hop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, false)
    }
}

/// The outcome of one request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Request id.
    pub request: u64,
    /// User.
    pub user: CompactString,
    /// Degradation level.
    pub level: Level,
    /// The path actually walked: each model or tool and how it went
    /// (shown as `gpt-4o ✗503×3 → claude-haiku ✓`).
    pub chain: Vec<Hop>,
    /// Estimated quality (0..=1).
    pub quality: f64,
    /// Tokens consumed by all attempts.
    pub tokens: u64,
    /// Cost of all attempts (USD).
    pub cost_usd: f64,
    /// Components that were unavailable.
    pub missing: Vec<String>,
    /// What to tell the user when degraded.
    pub user_message: Option<String>,
    /// The answer text, when there is one.
    #[serde(skip)]
    pub answer: Option<Arc<str>>,
    /// Age of a cached answer (ms), when stale.
    pub stale_ms: Option<u64>,
    /// Provider and tool attempts made.
    pub attempts: u32,
    /// Time from arrival to outcome (ms).
    pub latency_ms: u64,
    /// Its name outside (`x-fusebox-request-id`), for a gateway's request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<CompactString>,
}

impl Outcome {
    /// Its path as shown, hop by hop (`["gpt-4o ✗503×3", "claude-haiku ✓"]`).
    pub fn path(&self) -> Vec<String> {
        self.chain.iter().map(ToString::to_string).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hop_reads_with_symbols_and_in_ascii_alike() {
        let tried = |end, tries| Hop {
            tries,
            ..Hop::new("gpt-4o", end)
        };
        let cases = [
            (Hop::ok("gpt-4o"), "gpt-4o ✓", "gpt-4o ok"),
            (tried(HopEnd::Ok, 2), "gpt-4o ✓×2", "gpt-4o ok x2"),
            (
                tried(HopEnd::Failed("503".into()), 3),
                "gpt-4o ✗503×3",
                "gpt-4o failed 503 x3",
            ),
            (tried(HopEnd::Open, 1), "gpt-4o ⊘open", "gpt-4o skipped open"),
            (tried(HopEnd::Rate, 1), "gpt-4o ⏳rate", "gpt-4o skipped rate"),
            (tried(HopEnd::Sla, 1), "gpt-4o ⌛sla", "gpt-4o skipped sla"),
            (tried(HopEnd::Outrun, 1), "gpt-4o ⏱outrun", "gpt-4o cancelled outrun"),
            (
                tried(HopEnd::Cut("timeout".into()), 1),
                "gpt-4o ✗cut timeout",
                "gpt-4o failed cut timeout",
            ),
            (tried(HopEnd::Resumed, 1), "gpt-4o ✓ resumed", "gpt-4o ok resumed"),
            (
                Hop::new("tool:search", HopEnd::Stale(Box::new(HopEnd::Failed("503".into())))),
                "tool:search ✗503 → cache",
                "tool:search failed 503 -> cache",
            ),
            (
                Hop::new("módel", HopEnd::Unsupported("no «images»".into())),
                "módel skipped: no «images»",
                "mdel skipped: no images",
            ),
        ];
        for (hop, shown, ascii) in cases {
            assert_eq!(hop.to_string(), shown);
            assert_eq!(hop.ascii().to_string(), ascii);
        }
    }
}
