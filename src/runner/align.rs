//! A cut answer continued in a user turn (a model that takes no prefill):
//! asked for only the rest, a model often begins by writing again some of
//! what the client was sent — its last words, the sentence or paragraph it
//! was in, or the whole answer from its start. The continuation's text is
//! held until it is known how it lines up with the sent text, then:
//!
//! - it goes on from where the sent text stopped: it is passed on (held
//!   only while it still reads as the start of some repeat);
//! - it writes again a part of the sent text that runs to its end (two
//!   words or more, or one of [`MIN_WORD`] bytes or more), then goes on:
//!   that part is left out and the rest passed on;
//! - it writes again [`DIVERGED`] words or more of the sent text and then
//!   says something else (a restart that goes its own way, a middle part
//!   written again before the rest): the client already has the other
//!   version, so the stream must end, not be spliced ([`Misaligned`]);
//! - it is still writing the sent text again after
//!   [`crate::limits::RESUME_HOLD`] bytes: it ends so too.
//!
//! A repeat begins at a word of the sent text. The same text means: any
//! run of whitespace matches any other, the repeat's first letter may
//! differ in ASCII case (a sentence begun again), all else exactly.

use crate::limits::RESUME_HOLD;

/// The fewest bytes a one-word repeat of the sent text's end has (a
/// shorter word again may be the answer's own).
const MIN_WORD: usize = 12;
/// The fewest words written again before a continuation goes its own way
/// for it to be a repeat that diverged (fewer: a continuation that merely
/// begins with words found in the answer, as "The" or "it is").
const DIVERGED: usize = 3;
/// The most places in the sent text a repeat is watched from (the start,
/// and the last ones before its end): only an answer whose words repeat
/// over and over has more.
const MAX_STARTS: usize = 1024;

/// Why a continuation could not be lined up with the sent text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Misaligned {
    /// It wrote again this many words of the sent text, then went on
    /// differently from it.
    Diverged(usize),
    /// It was still writing the sent text again after this many bytes.
    Undecided(usize),
}

impl std::fmt::Display for Misaligned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Misaligned::Diverged(words) => {
                write!(f, "wrote again {words} words of the answer, then went on differently")
            }
            Misaligned::Undecided(bytes) => {
                write!(f, "still repeated the answer after {bytes} bytes")
            }
        }
    }
}

/// What a continuation's text does now.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// It may still be a repeat: held.
    Hold,
    /// It lines up: this text (all held, any repeat left out) goes to the
    /// client, and what follows goes as it comes.
    Send(String),
    /// It cannot line up: the stream ends.
    Stop(Misaligned),
}

/// The start of a continuation, held until it lines up.
#[derive(Debug)]
pub(super) struct Align {
    /// The sent text, each whitespace run one space, trimmed.
    sent: String,
    /// The continuation's text so far, as it came.
    held: String,
    /// Where in `sent` the repeats it may still be begin.
    live: Vec<u32>,
    /// Whether `live` was set (a letter came).
    seeded: bool,
    /// How far each live repeat has matched (bytes of `sent`).
    matched: usize,
    /// Whitespace came after the last letter, not yet compared.
    space: bool,
    /// The longest repeat that ran to the end of the sent text: its length
    /// in `sent` and where it ends in `held`.
    whole: Option<(usize, usize)>,
    /// The furthest a repeat that stopped short matched: where it began in
    /// `sent`, how far it matched, and whether the continuation ended there.
    broke: Option<(usize, usize, bool)>,
}

impl Align {
    /// Watching a continuation of `sent`.
    pub(super) fn after(sent: &str) -> Self {
        let mut norm = String::with_capacity(sent.len());
        for w in sent.split_whitespace() {
            if !norm.is_empty() {
                norm.push(' ');
            }
            norm.push_str(w);
        }
        Self {
            sent: norm,
            held: String::new(),
            live: Vec::new(),
            seeded: false,
            matched: 0,
            space: false,
            whole: None,
            broke: None,
        }
    }

    /// Takes the continuation's next text.
    pub(super) fn take(&mut self, text: &str) -> Step {
        let from = self.held.len();
        self.held.push_str(text);
        for (i, c) in text.char_indices() {
            let end = from + i + c.len_utf8();
            if c.is_whitespace() {
                self.space |= self.seeded;
                if !self.seeded && end > RESUME_HOLD {
                    // Only whitespace so far: nothing it could repeat.
                    return Step::Send(std::mem::take(&mut self.held));
                }
                continue;
            }
            if !self.seeded {
                self.seed(c);
            }
            if std::mem::take(&mut self.space) {
                self.step(' ', end);
            }
            if !self.live.is_empty() {
                self.step(c, end);
            }
            if self.live.is_empty() {
                return match self.decide() {
                    Ok(t) => Step::Send(t),
                    Err(why) => Step::Stop(why),
                };
            }
            if end > RESUME_HOLD {
                return Step::Stop(Misaligned::Undecided(RESUME_HOLD));
            }
        }
        Step::Hold
    }

    /// The held text to send now (the continuation goes on with something
    /// other than text, or ends), any repeat left out; or why it cannot go.
    pub(super) fn end(mut self) -> Result<String, Misaligned> {
        if let Some(&j) = self.live.first() {
            // Still repeating when it stopped: a repeat cut short here.
            self.broke = Some((j as usize, self.matched, true));
        }
        self.decide()
    }

    /// The places a repeat beginning with `c` may start: each word of the
    /// sent text beginning so (the first letter in either case).
    fn seed(&mut self, c: char) {
        self.seeded = true;
        let starts = std::iter::once(0).chain(self.sent.match_indices(' ').map(|(i, _)| i + 1));
        let mut live: Vec<u32> = starts
            .filter(|&j| {
                self.sent[j..]
                    .chars()
                    .next()
                    .is_some_and(|s| s.eq_ignore_ascii_case(&c))
            })
            .filter_map(|j| u32::try_from(j).ok())
            .collect();
        if live.len() > MAX_STARTS {
            let keep = live.len() - (MAX_STARTS - 1);
            live.drain(1..keep);
        }
        self.live = live;
    }

    /// Compares the continuation's next character `c` (ending at `end` in
    /// `held`) with each live repeat's.
    fn step(&mut self, c: char, end: usize) {
        let (sent, k) = (&self.sent, self.matched);
        let mut broke = None;
        self.live.retain(|&j| {
            let at = j as usize + k;
            let same = sent[at..]
                .chars()
                .next()
                .is_some_and(|s| s == c || (k == 0 && s.eq_ignore_ascii_case(&c)));
            if !same {
                broke = Some((j as usize, k, false));
            }
            same
        });
        if broke.is_some() {
            self.broke = broke;
        }
        self.matched += c.len_utf8();
        let (k, mut whole) = (self.matched, None);
        self.live.retain(|&j| {
            let done = j as usize + k == sent.len();
            if done && repeats(&sent[j as usize..]) {
                whole = Some((k, end));
            }
            !done
        });
        if whole.is_some() {
            self.whole = whole;
        }
    }

    /// How the held text lines up, every repeat it may be settled: the
    /// longest repeat of the sent text's end is left out, unless a repeat
    /// went on [`DIVERGED`] words or more past it and then stopped matching.
    fn decide(&mut self) -> Result<String, Misaligned> {
        let (len, end) = self.whole.unwrap_or((0, 0));
        if let Some((j, far, ended)) = self.broke.filter(|b| b.1 > len) {
            if words(&self.sent, j + len, j + far, ended) >= DIVERGED {
                return Err(Misaligned::Diverged(words(&self.sent, j, j + far, ended)));
            }
        }
        Ok(self.held.split_off(end))
    }
}

/// Whether a part of the sent text that runs to its end, written again, is
/// taken for a repeat: two words or more, or one long word.
fn repeats(part: &str) -> bool {
    part.len() >= MIN_WORD || part.contains(' ')
}

/// The words of `sent` that end within `from..to` (`to` a word's end when
/// the continuation `ended` there).
fn words(sent: &str, from: usize, to: usize, ended: bool) -> usize {
    let b = sent.as_bytes();
    (from + 1..=to)
        .filter(|&p| b[p - 1] != b' ' && (p == b.len() || b[p] == b' ' || (p == to && ended)))
        .count()
}

#[cfg(test)]
#[path = "align_tests.rs"]
mod tests;
