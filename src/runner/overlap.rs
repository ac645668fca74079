//! A cut answer continued in a user turn (a model that takes no prefill):
//! asked for only the rest, a model may still begin by writing again the
//! end of what the client was sent. The continuation's first text is held
//! until it shows whether it does, and such a repeat is dropped. A repeat
//! starts at a word of the sent text and runs to its end; one word of
//! fewer than 12 bytes is not taken for one (it may be the answer's own).

/// The most of the sent answer's end compared (bytes).
const TAIL: usize = 200;
/// The fewest bytes a one-word repeat has.
const MIN_WORD: usize = 12;

/// The start of a continuation, held while it may be a repeat.
#[derive(Debug)]
pub(super) struct Overlap {
    /// The end of what the client was sent (no trailing whitespace).
    tail: String,
    /// The continuation's text so far.
    held: String,
}

impl Overlap {
    /// Watching a continuation of `sent`.
    pub(super) fn after(sent: &str) -> Self {
        let mut start = sent.len().saturating_sub(TAIL);
        while !sent.is_char_boundary(start) {
            start += 1;
        }
        Self {
            tail: sent[start..].to_string(),
            held: String::new(),
        }
    }

    /// Takes the continuation's next text: once it is clear whether it
    /// begins with a repeat, the text to send (all held, the repeat left
    /// out); `None` while it may yet.
    pub(super) fn take(&mut self, text: &str) -> Option<String> {
        self.held.push_str(text);
        repeat(&self.tail, &self.held, false).map(|n| self.held[n..].to_string())
    }

    /// The held text to send now (the continuation goes on with something
    /// other than text, or ends), its repeat left out.
    pub(super) fn release(self) -> String {
        let n = repeat(&self.tail, &self.held, true).unwrap_or(0);
        self.held[n..].to_string()
    }
}

/// The bytes at the start of `held` (with the whitespace before them) that
/// repeat the end of `tail`, the longest repeat taken; `None` while `held`
/// is the start of a longer one, unless `now`.
fn repeat(tail: &str, held: &str, now: bool) -> Option<usize> {
    let h = held.trim_start();
    let lead = held.len() - h.len();
    let mut repeats = suffixes(tail).filter(|s| s.len() >= MIN_WORD || s.contains(char::is_whitespace));
    let found = repeats.clone().find(|s| h.starts_with(s)).map(|s| lead + s.len());
    let may_grow = repeats.any(|s| s.len() > h.len() && s.starts_with(h));
    match found {
        _ if may_grow && !now => None,
        Some(n) => Some(n),
        None => Some(0),
    }
}

/// The ends of `tail` that begin a word, longest first.
fn suffixes(tail: &str) -> impl Iterator<Item = &str> + Clone {
    let starts = tail
        .char_indices()
        .filter(|(_, c)| c.is_whitespace())
        .map(|(i, c)| i + c.len_utf8());
    std::iter::once(0)
        .chain(starts)
        .map(move |i| &tail[i..])
        .filter(|s| !s.is_empty() && !s.starts_with(char::is_whitespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fed(sent: &str, parts: &[&str]) -> (usize, String) {
        let mut o = Overlap::after(sent);
        for (i, p) in parts.iter().enumerate() {
            if let Some(out) = o.take(p) {
                return (i, out);
            }
        }
        (parts.len(), o.release())
    }

    #[test]
    fn a_repeat_of_the_end_is_dropped_once_it_is_clear() {
        let sent = "Your order 38100 is";
        // Held while it may be a repeat, then sent without it.
        assert_eq!(fed(sent, &["38", "100 i", "s in", " transit"]), (2, " in".into()));
        assert_eq!(fed(sent, &["  38100 is in transit"]), (0, " in transit".into()));
        // A word cut in two: its start is not written twice.
        assert_eq!(fed("It is in tr", &["in transit."]), (0, "ansit.".into()));
        // The longest repeat is taken.
        assert_eq!(fed("a b a b", &["a b a b c"]), (0, " c".into()));
    }

    #[test]
    fn text_that_is_no_repeat_goes_at_once() {
        assert_eq!(fed("Your order 38100 is", &["in transit"]), (0, "in transit".into()));
        // One short word again may be the answer's own.
        assert_eq!(fed("Your order is", &["is", " shipped"]), (0, "is".into()));
        // Empty text decides nothing.
        assert_eq!(fed("Your order is", &["", " "]), (2, " ".into()));
        // A one-word repeat of 12 bytes or more is one.
        assert_eq!(
            fed("see internationalization", &["internationalization."]),
            (0, ".".into())
        );
    }

    #[test]
    fn what_is_held_at_the_end_is_sent() {
        assert_eq!(fed("Your order 38100 is", &["Your ord"]), (1, "Your ord".into()));
        assert_eq!(
            fed("Your order 38100 is", &["Your order 38100"]),
            (1, "Your order 38100".into())
        );
    }

    #[test]
    fn only_the_end_of_a_long_answer_is_compared() {
        let sent = format!("{} the end", "é".repeat(300));
        let o = Overlap::after(&sent);
        assert!(o.tail.len() <= TAIL && sent.ends_with(&o.tail));
    }
}
