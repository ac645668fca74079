//! What an import's errors quote of their input, cut short: a trace file
//! is anyone's, and a megabyte span id or string said back whole would
//! bury the error (and fill a log).

use std::fmt::Write as _;

/// Characters of an input an error quotes at most.
pub const SHOWN: usize = 64;

/// `s`, whole when short, else its first [`SHOWN`] characters, an ellipsis
/// and how long it is.
pub fn cut(s: &str) -> String {
    match s.char_indices().nth(SHOWN) {
        None => s.to_string(),
        Some((at, _)) => format!("{}… ({} chars)", &s[..at], s.chars().count()),
    }
}

/// `bytes` in hex as [`cut`] says it, without writing out more of it.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::new();
    for b in bytes.iter().take(SHOWN / 2) {
        let _ = write!(out, "{b:02x}");
    }
    if bytes.len() > SHOWN / 2 {
        let _ = write!(out, "… ({} chars)", bytes.len() * 2);
    }
    out
}

/// serde's message for `e` with each string it quotes (a value from the
/// input) [`cut`].
pub fn serde(e: &serde_json::Error) -> String {
    let said = e.to_string();
    let mut out = String::with_capacity(said.len().min(1024));
    let mut rest = said.as_str();
    while let Some(open) = rest.find('"') {
        out.push_str(&rest[..=open]);
        let inner = &rest[open + 1..];
        // The closing quote, past escaped ones.
        let mut escaped = false;
        let close = inner.char_indices().find_map(|(i, c)| match c {
            '\\' if !escaped => {
                escaped = true;
                None
            }
            '"' if !escaped => Some(i),
            _ => {
                escaped = false;
                None
            }
        });
        let Some(close) = close else {
            out.push_str(&cut(inner));
            return out;
        };
        out.push_str(&cut(&inner[..close]));
        out.push('"');
        rest = &inner[close + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_input_is_said_whole_and_long_input_by_its_start_and_length() {
        assert_eq!(cut("abc"), "abc");
        let long = "é".repeat(100);
        assert_eq!(cut(&long), format!("{}… (100 chars)", "é".repeat(64)));
        assert_eq!(hex(&[0xab; 8]), "abababababababab");
        assert_eq!(hex(&[0xab; 100]), format!("{}… (200 chars)", "ab".repeat(32)));
    }
}
