//! What a line must hold beyond its types, and saying what is wrong with
//! a line that does not read.

use super::error::{bad, Bad};
use super::reader::Parsed;
use super::{Key, LogId, Record, Transport};
use crate::command::Command;
use crate::outcome::Level;
use crate::provider::Message;
use crate::request::Via;
use crate::target::Target;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The longest a log may span: ten years.
pub const MAX_SPAN_MS: u64 = 10 * 365 * 86_400_000;
pub use crate::limits::MAX_TOKENS;

/// `rec` within the bounds [`validate`] checks, so that whatever fusebox
/// writes (a recording, an import) its reader takes: a name past
/// [`crate::limits::MAX_NAME_LEN`] is cut at it, a token count past
/// [`MAX_TOKENS`] is held at it. The gateway refuses such values at its
/// door, so a recording of its traffic never needs this; what is imported
/// from elsewhere may.
pub fn fit(rec: &mut Record) {
    if let Record::Attempt(a) = rec {
        a.target = fit_target(&a.target);
        a.cost_usd = a.cost_usd.filter(|c| c.is_finite());
    }
    if let Record::Transition(t) = rec {
        t.breaker = fit_target(&t.breaker);
    }
    // JSON has no NaN or infinity: written, they would read back as null.
    if let Record::Outcome(o) = rec {
        for x in [&mut o.quality, &mut o.cost_usd] {
            if !x.is_finite() {
                *x = 0.0;
            }
        }
        if let Some(k) = &mut o.key {
            cut(k, crate::limits::MAX_NAME_LEN);
        }
    }
    if let Record::Request(r) = rec {
        r.prompt_tokens = r.prompt_tokens.min(MAX_TOKENS);
        r.max_tokens = r.max_tokens.min(MAX_TOKENS);
        for name in [&mut r.user, &mut r.session, &mut r.route] {
            cut(name, crate::limits::MAX_NAME_LEN);
        }
        if let Some(s) = &mut r.sub_user {
            cut(s, crate::limits::MAX_NAME_LEN);
        }
        for m in r.reach.iter_mut().flatten() {
            cut(m, crate::limits::MAX_NAME_LEN);
        }
    }
}

/// The line of `rec`, fitted ([`fit`]) and within the reader's
/// [`super::MAX_LINE_BYTES`]: a record whose content (a conversation, an
/// answer, kept with `--record-content full`) would pass it is written
/// without that content.
pub fn line_of(mut rec: Record) -> String {
    fit(&mut rec);
    // Content first, then the lists of names, go until the line fits.
    for step in 0..3 {
        let line = rec.to_line();
        if line.len() <= super::MAX_LINE_BYTES || step == 2 {
            return line;
        }
        match (&mut rec, step) {
            (Record::Request(r), 0) => r.messages = None,
            (Record::Attempt(a), 0) => a.answer = None,
            (Record::Request(r), _) => (r.tools.clear(), r.critical_tools.clear(), r.reach = None).2,
            (Record::Attempt(a), _) => (a.tool_calls.clear(), a.semantic_failure = None).1,
            _ => {}
        }
    }
    rec.to_line()
}

/// `t` as a log can name it: a name of text (control characters
/// replaced), not empty, within [`crate::limits::MAX_TARGET_LEN`] with its kind.
fn fit_target(t: &Target) -> Target {
    let name = t.name();
    let room = crate::limits::MAX_TARGET_LEN - t.kind().as_str().len() - 1;
    if !name.is_empty() && name.len() <= room && !name.chars().any(char::is_control) {
        return t.clone();
    }
    let mut clean: compact_str::CompactString = name
        .chars()
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect();
    cut(&mut clean, room);
    if clean.trim().is_empty() {
        clean = "unnamed".into();
    }
    Target::new(t.kind(), &clean)
}

/// `s` cut to at most `max` bytes, at a character's boundary.
fn cut(s: &mut compact_str::CompactString, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

/// Checks on one record alone that serde does not make.
pub(super) fn validate(rec: &Record) -> Result<(), Bad> {
    match rec {
        Record::Request(r) if r.prompt_tokens > MAX_TOKENS => Err(bad(
            "prompt_tokens",
            format!("{} is more than {MAX_TOKENS}", r.prompt_tokens),
        )),
        Record::Request(r) if r.max_tokens > MAX_TOKENS => {
            Err(bad("max_tokens", format!("{} is more than {MAX_TOKENS}", r.max_tokens)))
        }
        Record::Request(r) => {
            let max = crate::limits::MAX_NAME_LEN;
            let sub_user = r.sub_user.as_ref().map(|s| ("sub_user", s));
            let reach = r.reach.iter().flatten().map(|m| ("reach", m));
            match [("user", &r.user), ("session", &r.session), ("route", &r.route)]
                .into_iter()
                .chain(sub_user)
                .chain(reach)
                .find(|(_, n)| n.len() > max)
            {
                Some((field, _)) => Err(bad(field, format!("longer than {max} bytes"))),
                None => Ok(()),
            }
        }
        Record::Operator(op) if !Command::ACTIONS.contains(&op.action.as_str()) => Err(bad(
            "action",
            format!(
                "unknown action `{}`, expected one of {}",
                op.action,
                Command::ACTIONS.join(", ")
            ),
        )),
        Record::Operator(op) if op.action == "set_fault" => {
            let spec = op.args.as_ref().and_then(|a| a.get("fault"));
            match spec.map(crate::provider::fault::FaultSpec::deserialize) {
                Some(Ok(f)) => match f.check() {
                    Ok(()) => Ok(()),
                    Err(e) => Err(bad("args.fault", e.to_string())),
                },
                Some(Err(e)) => Err(bad("args.fault", format!("not a fault: {e}"))),
                None => Err(bad(
                    "args.fault",
                    r#"set_fault needs its fault, e.g. {"fault":{"fault":{"type":"status","code":503},"rate":0.5}}"#,
                )),
            }
        }
        Record::Attempt(a) if !a.target.has_fault() => Err(not_called(&a.target.to_string())),
        _ => Ok(()),
    }
}

/// An attempt's target that no call is made to.
fn not_called(target: &str) -> Bad {
    bad(
        "target",
        format!(
            "`{}` is not `provider:NAME` or `tool:NAME`",
            crate::command::bounded(target)
        ),
    )
}

/// Finds which field of a line that failed to deserialize is at fault.
pub(super) fn diagnose(line: &[u8], err: serde_json::Error) -> Parsed {
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return Parsed::NotJson(describe(&e)),
    };
    let Some(obj) = value.as_object() else {
        return Parsed::Bad(bad("", "not a JSON object"));
    };
    let kind = match obj.get("kind") {
        None => return Parsed::Bad(bad("kind", "missing")),
        Some(Value::String(k)) => k.as_str(),
        Some(other) => return Parsed::Bad(bad("kind", format!("must be a string, not {other}"))),
    };
    let found = match kind {
        "header" => check_header(obj),
        "request" => check_request(obj),
        "attempt" => check_attempt(obj),
        "outcome" => check_outcome(obj),
        "transition" => check_transition(obj),
        "operator" => check_operator(obj),
        _ => return Parsed::UnknownKind(kind.to_string()),
    };
    match found {
        Err(b) => Parsed::Bad(b),
        // Not pinned on one field (e.g. a duplicate key): serde's message,
        // naming the field when it does.
        Ok(()) => {
            let msg = describe(&err);
            let field = msg
                .split_once("field `")
                .and_then(|(_, rest)| rest.split_once('`'))
                .map_or("kind", |(f, _)| f)
                .to_string();
            Parsed::Bad((field, msg))
        }
    }
}

/// serde_json's message, with its position given as a column (the line is
/// always 1 within one log line, which reads oddly next to the file's line).
fn describe(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    if e.line() == 0 {
        return msg;
    }
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    match msg.strip_suffix(&suffix) {
        Some(head) => format!("{head} at column {}", e.column()),
        None => msg,
    }
}

/// A required field of type `T`.
fn req<T: DeserializeOwned>(obj: &Map<String, Value>, name: &str) -> Result<(), Bad> {
    match obj.get(name) {
        None => Err(bad(name, "missing")),
        Some(v) => T::deserialize(v).map(drop).map_err(|e| bad(name, e.to_string())),
    }
}

/// An optional field of type `T` (absent is fine).
fn opt<T: DeserializeOwned>(obj: &Map<String, Value>, name: &str) -> Result<(), Bad> {
    match obj.get(name) {
        None => Ok(()),
        Some(v) => T::deserialize(v).map(drop).map_err(|e| bad(name, e.to_string())),
    }
}

fn check_header(o: &Map<String, Value>) -> Result<(), Bad> {
    req::<u32>(o, "v")?;
    req::<String>(o, "started_at")?;
    req::<u64>(o, "seed")
}

fn check_request(o: &Map<String, Value>) -> Result<(), Bad> {
    req::<u64>(o, "t_ms")?;
    req::<LogId>(o, "id")?;
    req::<String>(o, "user")?;
    req::<String>(o, "session")?;
    req::<String>(o, "route")?;
    req::<u32>(o, "prompt_tokens")?;
    req::<u32>(o, "max_tokens")?;
    req::<Vec<String>>(o, "tools")?;
    opt::<Vec<String>>(o, "critical_tools")?;
    opt::<Option<u32>>(o, "max_steps")?;
    opt::<Option<Vec<Message>>>(o, "messages")?;
    opt::<Option<String>>(o, "content_hash")?;
    opt::<Option<Key>>(o, "answer_key")?;
    opt::<Option<u32>>(o, "choices")?;
    opt::<Option<Vec<String>>>(o, "reach")?;
    opt::<Via>(o, "via")
}

fn check_attempt(o: &Map<String, Value>) -> Result<(), Bad> {
    req::<u64>(o, "t_ms")?;
    req::<LogId>(o, "request")?;
    req::<String>(o, "target")?;
    if let Some(Err(_)) = o["target"].as_str().map(str::parse::<Target>) {
        return Err(not_called(o["target"].as_str().unwrap_or_default()));
    }
    opt::<Option<String>>(o, "model")?;
    // Always written (possibly null); a missing one reads as null, as serde does.
    opt::<Option<u16>>(o, "status")?;
    opt::<Option<Transport>>(o, "transport")?;
    req::<u64>(o, "latency_ms")?;
    req::<u32>(o, "input_tokens")?;
    req::<u32>(o, "output_tokens")?;
    opt::<BTreeMap<String, String>>(o, "headers")?;
    opt::<Option<String>>(o, "semantic_failure")?;
    opt::<Vec<String>>(o, "tool_calls")?;
    opt::<Vec<Key>>(o, "tool_keys")?;
    opt::<Option<String>>(o, "answer")?;
    opt::<Option<crate::telemetry::events::Cut>>(o, "cut")?;
    opt::<Option<f64>>(o, "cost_usd")
}

fn check_outcome(o: &Map<String, Value>) -> Result<(), Bad> {
    req::<u64>(o, "t_ms")?;
    req::<LogId>(o, "request")?;
    req::<Level>(o, "level")?;
    req::<Vec<String>>(o, "chain")?;
    req::<f64>(o, "quality")?;
    req::<u64>(o, "tokens")?;
    req::<f64>(o, "cost_usd")?;
    req::<Vec<String>>(o, "missing")
}

fn check_transition(o: &Map<String, Value>) -> Result<(), Bad> {
    req::<u64>(o, "t_ms")?;
    req::<String>(o, "breaker")?;
    req::<String>(o, "from")?;
    req::<String>(o, "to")?;
    req::<String>(o, "reason")
}

fn check_operator(o: &Map<String, Value>) -> Result<(), Bad> {
    req::<u64>(o, "t_ms")?;
    req::<String>(o, "action")?;
    req::<String>(o, "target")?;
    opt::<Option<Map<String, Value>>>(o, "args")?;
    req::<String>(o, "by")
}
