//! The aligner's cases, and properties over any answer, cut and repeat.

use super::*;
use proptest::prelude::*;

/// What the client gets of a continuation fed as `parts`: the text sent,
/// and how many parts were held before it lined up; or why it stopped.
fn fed(sent: &str, parts: &[&str]) -> Result<(usize, String), Misaligned> {
    let mut a = Align::after(sent);
    for (i, p) in parts.iter().enumerate() {
        match a.take(p) {
            Step::Hold => {}
            Step::Send(t) => return Ok((i, t + &parts[i + 1..].concat())),
            Step::Stop(why) => return Err(why),
        }
    }
    a.end().map(|t| (parts.len(), t))
}

const SENT: &str = "The order was packed. Your order 38100 is";

#[test]
fn a_true_continuation_goes_as_soon_as_it_is_no_repeat() {
    assert_eq!(fed(SENT, &["in transit", "."]), Ok((0, "in transit.".into())));
    // "The" also begins the answer: held until the next word says otherwise.
    assert_eq!(
        fed(SENT, &["The ", "package", " left."]),
        Ok((1, "The package left.".into()))
    );
    // Two words found in the answer are not yet a repeat that diverged.
    assert_eq!(
        fed(SENT, &["Your order ", "arrives"]),
        Ok((1, "Your order arrives".into()))
    );
    // Empty text and whitespace decide nothing.
    assert_eq!(fed(SENT, &["", " ", " in"]), Ok((2, "  in".into())));
    // One short word again may be the answer's own.
    assert_eq!(fed("Your order is", &["is", " shipped"]), Ok((0, "is shipped".into())));
}

#[test]
fn a_repeat_running_to_the_end_of_the_sent_text_is_left_out() {
    // Its end, held while it may be one.
    assert_eq!(
        fed(SENT, &["38", "100 i", "s in", " transit"]),
        Ok((2, " in transit".into()))
    );
    // From the start of its sentence.
    assert_eq!(
        fed(SENT, &["Your order 38100 is in transit"]),
        Ok((0, " in transit".into()))
    );
    // From the start of the answer: sent as soon as it has all been again.
    assert_eq!(
        fed(SENT, &["The order was packed. ", "Your order 38100 is", " in transit"]),
        Ok((1, " in transit".into()))
    );
    // A word cut in two: its start is not written twice.
    assert_eq!(fed("It is in tr", &["in transit."]), Ok((0, "ansit.".into())));
    // The longest repeat is taken.
    assert_eq!(fed("a b a b", &["a b a b c"]), Ok((0, " c".into())));
    // A one-word repeat of 12 bytes or more is one.
    assert_eq!(
        fed("see internationalization", &["internationalization."]),
        Ok((0, ".".into()))
    );
    // The continuation is the repeat alone: nothing is sent.
    assert_eq!(fed(SENT, &["Your order 38100 is"]), Ok((0, String::new())));
}

#[test]
fn whitespace_runs_match_and_a_sentence_begun_again_may_change_its_first_letter() {
    let sent = "Packed.\n\nIt left  the depot and";
    assert_eq!(fed(sent, &["It left\nthe   depot and then"]), Ok((0, " then".into())));
    assert_eq!(
        fed(sent, &["\n  Packed. It left the depot and then"]),
        Ok((0, " then".into()))
    );
    assert_eq!(fed(sent, &["The depot and then"]), Ok((0, " then".into())));
    // Past the first letter case counts: not a repeat, and no more than
    // two words matched, so it goes as it is.
    assert_eq!(fed(sent, &["it Left the"]), Ok((0, "it Left the".into())));
}

#[test]
fn a_repeat_that_goes_its_own_way_stops_the_stream() {
    // A restart that then says something else.
    assert_eq!(fed(SENT, &["The order was ", "shipped"]), Err(Misaligned::Diverged(3)));
    // A middle part written again before the rest.
    assert_eq!(
        fed(SENT, &["was packed. Your in transit"]),
        Err(Misaligned::Diverged(3))
    );
    // Going its own way three words past the end of a shorter repeat of
    // the end: "a b" again, or the answer again and then otherwise, which
    // are not told apart.
    assert_eq!(fed("a b c d e. a b", &["a b c d e. f"]), Err(Misaligned::Diverged(5)));
    // Two words past it: the repeat of the end, then the rest.
    assert_eq!(fed("a b c d. a b", &["a b c d. e"]), Ok((0, " c d. e".into())));
    // It ends while still repeating.
    assert_eq!(fed(SENT, &["The order was pac"]), Err(Misaligned::Diverged(4)));
    assert_eq!(fed(SENT, &["The order"]), Ok((1, "The order".into())));
}

#[test]
fn a_repeat_longer_than_the_hold_stops_the_stream() {
    let sent = "word ".repeat(2_000);
    let more = "word ".repeat(1_000);
    assert_eq!(fed(&sent, &[&more]), Err(Misaligned::Undecided(RESUME_HOLD)));
    // Whitespace alone is not held past it.
    let blank = " ".repeat(RESUME_HOLD + 1);
    assert_eq!(fed(SENT, &[&blank]), Ok((0, blank.clone())));
    // Many places a repeat may begin are watched, from the start and the end.
    let a = Align::after(&sent);
    let mut a2 = a;
    assert_eq!(a2.take("w"), Step::Hold);
    assert_eq!(a2.live.len(), MAX_STARTS);
    assert_eq!((a2.live[0], a2.live[1]), (0, ((2_000 - MAX_STARTS + 1) * 5) as u32));
}

/// `n` words none of which is another's or begins as another does: any
/// alignment of a continuation with them is the one it was made with.
fn distinct_words(n: usize) -> impl Strategy<Value = Vec<String>> {
    let stems = ["al", "Be", "ca", "Do", "ex", "fy", "Gi", "ho", "Ja", "ku", "Lo", "mu"];
    proptest::collection::vec((0..stems.len(), "[a-z]{0,6}", "[.,;!]?"), n).prop_map(move |ws| {
        ws.into_iter()
            .enumerate()
            .map(|(i, (s, tail, p))| format!("{}{tail}{i}{p}", stems[s]))
            .collect()
    })
}

/// An answer of those words, joined by whitespace runs.
fn answer() -> impl Strategy<Value = String> {
    (2usize..80)
        .prop_flat_map(|n| {
            (
                distinct_words(n),
                proptest::collection::vec(prop_oneof![Just(" "), Just("\n"), Just("  "), Just("\n\n")], n),
            )
        })
        .prop_map(|(words, gaps)| {
            words
                .iter()
                .zip(gaps)
                .map(|(w, g)| format!("{w}{g}"))
                .collect::<String>()
                .trim_end()
                .to_string()
        })
}

/// What the continuation writes before the rest.
#[derive(Clone, Debug)]
enum Again {
    /// Nothing: it goes on where the sent text stopped.
    Nothing,
    /// The sent text from the start of one of its words to its end (two
    /// words or more); 0: the whole answer again.
    From(usize),
    /// A part of the sent text from a word to the end of a later one, not
    /// the sent text's end, of at least [`DIVERGED`] words.
    Part(usize, usize),
}

/// The starts and ends of the words of `s`.
fn spans(s: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices().chain([(s.len(), ' ')]) {
        match (c.is_whitespace(), start) {
            (true, Some(b)) => {
                out.push((b, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    out
}

/// `x` with each whitespace run one space and its first letter's case
/// changed.
fn retype(x: &str) -> String {
    let x = x.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut chars = x.chars();
    let first = chars.next().map(|c| match c.is_ascii_uppercase() {
        true => c.to_ascii_lowercase(),
        false => c.to_ascii_uppercase(),
    });
    first.into_iter().chain(chars).collect()
}

/// Feeds `c` to an aligner of `kept` in parts cut at `cuts`: the text the
/// client gets after `kept`, or why the stream stopped.
fn client(kept: &str, c: &str, cuts: &[usize]) -> Result<String, Misaligned> {
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|&x| x % (c.len() + 1))
        .filter(|&x| c.is_char_boundary(x))
        .collect();
    at.extend([0, c.len()]);
    at.sort_unstable();
    at.dedup();
    let mut a = Some(Align::after(kept));
    let mut out = String::new();
    for w in at.windows(2) {
        let part = &c[w[0]..w[1]];
        match a.as_mut().map(|a| a.take(part)) {
            None => out.push_str(part),
            Some(Step::Hold) => {}
            Some(Step::Send(t)) => {
                out.push_str(&t);
                a = None;
            }
            Some(Step::Stop(why)) => return Err(why),
        }
    }
    if let Some(a) = a {
        out.push_str(&a.end()?);
    }
    Ok(out)
}

proptest! {
    /// For any answer, cut, and continuation that writes again the sent
    /// text from a word to its end (its start included) or none of it,
    /// the client reads the answer exactly once; one that writes again a
    /// part of it that stops short of its end (a prefix or a middle part)
    /// ends the stream. However the continuation's text is split, and
    /// whether the repeat keeps the sent whitespace and first letter.
    #[test]
    fn the_answer_reads_once_or_the_stream_stops(
        a in answer(),
        cut in 0.0f64..1.0,
        pick in (0usize..1000, 0usize..1000, 0usize..3),
        cuts in proptest::collection::vec(0usize..10_000, 0..12),
        retyped in proptest::bool::ANY,
    ) {
        // Cut somewhere after the first word.
        let first = spans(&a)[0].1;
        let mut at = first + ((a.len() - first) as f64 * cut) as usize;
        while !a.is_char_boundary(at) { at += 1; }
        let kept = a[..at].trim_end();
        let rest = &a[kept.len()..];
        let words = spans(kept);
        let again = match pick.2 {
            0 => Again::Nothing,
            // Two words or more of the end, or all of it.
            1 if words.len() >= 2 => Again::From(pick.0 % (words.len() - 1)),
            2 if words.len() > DIVERGED => {
                let from = pick.0 % (words.len() - DIVERGED);
                let to = from + DIVERGED - 1 + pick.1 % (words.len() - DIVERGED - from);
                Again::Part(from, to)
            }
            _ if words.len() >= 2 => Again::From(0),
            // One word: written again, it may be the answer's own.
            _ => Again::Nothing,
        };
        // The repeat as it was sent, or with its whitespace runs each one
        // space and its first letter's case changed: the same text.
        let again_as = |x: &str| if retyped { retype(x) } else { x.to_string() };
        let c = match again {
            Again::Nothing => rest.to_string(),
            Again::From(i) => format!("{}{rest}", again_as(&kept[words[i].0..])),
            Again::Part(i, j) => format!("{}{rest}", again_as(&kept[words[i].0..words[j].1])),
        };
        let got = client(kept, &c, &cuts);
        match again {
            Again::Part(..) => prop_assert!(matches!(got, Err(Misaligned::Diverged(n)) if n >= DIVERGED), "{got:?}"),
            Again::From(i) if kept.len() - words[i].0 > RESUME_HOLD => prop_assert!(got.is_err()),
            _ => prop_assert_eq!(format!("{kept}{}", got.unwrap()), a),
        }
    }

    /// Whatever the sent text and the continuation (words that repeat, so
    /// a repeat may be told several ways): the text sent is the
    /// continuation as written, less at most a start that writes again the
    /// end of the sent text, two words of it or more, or the stream stops.
    #[test]
    fn only_a_repeat_of_the_end_is_ever_left_out(
        sent in proptest::collection::vec(prop_oneof![Just("a"), Just("b"), Just("A"), Just("ab")], 0..12),
        cont in proptest::collection::vec(prop_oneof![Just("a"), Just("b"), Just("c"), Just("B"), Just(" "), Just("\n")], 0..24),
        cuts in proptest::collection::vec(0usize..100, 0..8),
    ) {
        let sent = sent.join(" ");
        let c = cont.concat();
        if let Ok(out) = client(&sent, &c, &cuts) {
            prop_assert!(c.ends_with(&out), "{out:?} is not the end of {c:?}");
            let dropped: Vec<&str> = c[..c.len() - out.len()].split_whitespace().collect();
            if !dropped.is_empty() {
                let words: Vec<&str> = sent.split_whitespace().collect();
                prop_assert!(dropped.len() <= words.len(), "{dropped:?}");
                let tail = &words[words.len() - dropped.len()..];
                prop_assert!(dropped.len() >= 2 || dropped[0].len() >= MIN_WORD);
                prop_assert!(dropped[0].eq_ignore_ascii_case(tail[0]) && dropped[1..] == tail[1..], "{dropped:?} {tail:?}");
            }
        }
    }

    /// A continuation none of whose words begins as one of the sent text's
    /// does goes at once, as written.
    #[test]
    fn a_continuation_unlike_the_answer_is_not_held(
        sent in "[a-m]{1,8}( [a-m]{1,8}){0,20}",
        cont in "[n-z]{1,8}( [a-z]{1,8}){0,10}",
    ) {
        let mut a = Align::after(&sent);
        prop_assert_eq!(a.take(&cont), Step::Send(cont.clone()));
    }
}
