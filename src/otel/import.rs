//! Traffic in: OTLP/JSON trace files (as the OpenTelemetry Collector's file
//! exporter writes them) read as a traffic log, so that an incident traced
//! elsewhere can be replayed.
//!
//! A request is a GenAI span (one with `gen_ai.*` attributes) without a
//! GenAI ancestor: fusebox's own request spans, or a framework's LLM call.
//! Its attempts are its GenAI descendants, or the span itself when it has
//! none. Status, latency, tokens, model and errors come from the spans;
//! what only fusebox's spans say (level, chain, tools offered, the step cap)
//! is read where present. Every other span is counted and skipped.

use super::quoted;
use crate::outcome::Level;
use crate::request::Via;
use crate::target::Target;
use crate::traffic::log::{
    AttemptRec, Header, LogId, OutcomeRec, Record, RequestRec, Transport, MAX_SPAN_MS, MAX_TOKENS, VERSION,
};
use anyhow::{bail, Context, Result};
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{status::StatusCode, Span, TracesData};
use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

/// A trace file read as traffic.
pub struct Imported {
    /// The log's records, header first, in time order.
    pub records: Vec<Record>,
    /// Requests made of spans.
    pub requests: usize,
    /// Spans that are not GenAI spans nor under one, and spans given
    /// twice, skipped.
    pub skipped: usize,
}

/// Reads the OTLP/JSON traces in `paths` (one JSON object per line, or
/// one document per file).
pub fn read(paths: &[impl AsRef<Path>]) -> Result<Imported> {
    let mut spans = Spans::default();
    let mut seed = None;
    for (file, path) in paths.iter().enumerate() {
        let path = path.as_ref();
        let opened = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let reader = std::io::BufReader::new(opened);
        let mut line_no = 0;
        for (i, line) in reader.lines().enumerate() {
            let line = line.with_context(|| format!("cannot read {}", path.display()))?;
            line_no = i + 1;
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<TracesData>(&line) {
                Ok(data) => spans.take(flatten(data, &mut seed), (file, line_no), path)?,
                Err(_) if i == 0 => {
                    // One document over several lines, perhaps.
                    let text =
                        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
                    let data: TracesData = serde_json::from_str(&text).map_err(|e| {
                        anyhow::anyhow!("{}: not OTLP/JSON traces: {}", path.display(), quoted::serde(&e))
                    })?;
                    spans.take(flatten(data, &mut seed), (file, 1), path)?;
                    break;
                }
                Err(e) => bail!(
                    "{}:{line_no}: not OTLP/JSON traces: {}",
                    path.display(),
                    quoted::serde(&e)
                ),
            }
        }
        if line_no == 0 {
            bail!("{}: empty (no traces)", path.display());
        }
    }
    let n = spans.spans.len();
    let imported = assemble(spans, seed.unwrap_or(DEFAULT_SEED), paths)?;
    if imported.requests == 0 {
        let shown: Vec<_> = paths.iter().map(|p| p.as_ref().display().to_string()).collect();
        bail!(
            "{}: no GenAI spans among its {n} spans (none has gen_ai.* attributes): no requests to replay",
            shown.join(" ")
        );
    }
    Ok(imported)
}

/// The spans read, each with the file and line it came from.
#[derive(Default)]
struct Spans {
    spans: Vec<Span>,
    /// Index of the file in the paths given, and the line.
    origins: Vec<(usize, usize)>,
    /// The ids seen, and the spans given again under them (an export
    /// retried), which are skipped.
    seen: std::collections::HashSet<(Vec<u8>, Vec<u8>)>,
    again: usize,
}

impl Spans {
    /// Takes the spans of one line, refusing one without its ids: a span
    /// is named by a 16-byte trace id and an 8-byte span id.
    fn take(&mut self, spans: impl Iterator<Item = Span>, at: (usize, usize), path: &Path) -> Result<()> {
        for s in spans {
            if s.trace_id.len() != 16 || s.span_id.len() != 8 {
                bail!(
                    "{}:{}: span `{}` has no valid ids (traceId {:?}, spanId {:?}): every span needs a 32-hex-digit traceId and a 16-hex-digit spanId",
                    path.display(),
                    at.1,
                    quoted::cut(&s.name),
                    quoted::hex(&s.trace_id),
                    quoted::hex(&s.span_id)
                );
            }
            if !self.seen.insert((s.trace_id.clone(), s.span_id.clone())) {
                self.again += 1;
                continue;
            }
            self.spans.push(s);
            self.origins.push(at);
        }
        Ok(())
    }
}

/// The output cap of a request whose spans say neither its cap nor any output.
const UNSAID_MAX_TOKENS: u32 = 1024;

/// The seed of runs that do not say theirs (the command line's default).
const DEFAULT_SEED: u64 = 42;

/// The spans of one export; `seed` is set from a fusebox resource's.
fn flatten(data: TracesData, seed: &mut Option<u64>) -> impl Iterator<Item = Span> {
    for r in &data.resource_spans {
        if let Some(s) = r.resource.as_ref().and_then(|r| int(&r.attributes, "fusebox.seed")) {
            seed.get_or_insert(s as u64);
        }
    }
    data.resource_spans
        .into_iter()
        .flat_map(|r| r.scope_spans)
        .flat_map(|s| s.spans)
}

fn is_genai(s: &Span) -> bool {
    s.attributes.iter().any(|kv| kv.key.starts_with("gen_ai."))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// Each span's GenAI request span: `None` for a span that is one (a
/// GenAI span with no GenAI ancestor) or is under none, else its topmost
/// GenAI ancestor. One pass over each chain of parents however deep, each
/// span visited once; a chain that loops back on itself is refused.
fn request_spans(spans: &Spans, paths: &[impl AsRef<Path>]) -> Result<Vec<Option<usize>>> {
    let all = &spans.spans;
    let by_id: HashMap<(&[u8], &[u8]), usize> = all
        .iter()
        .enumerate()
        .map(|(i, s)| ((&s.trace_id[..], &s.span_id[..]), i))
        .collect();
    let parent = |i: usize| {
        let s = &all[i];
        by_id.get(&(&s.trace_id[..], &s.parent_span_id[..])).copied()
    };
    /// A span's topmost GenAI span among itself and its ancestors, once known.
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Unseen,
        OnPath,
        Done(Option<usize>),
    }
    let mut mark = vec![Mark::Unseen; all.len()];
    let mut path = Vec::new();
    for start in 0..all.len() {
        let mut i = start;
        // Up to a span already known, or to the root.
        let mut above = loop {
            match mark[i] {
                Mark::Done(top) => break top,
                Mark::OnPath => {
                    let (file, line) = spans.origins[i];
                    bail!(
                        "{}:{line}: span {} is its own ancestor (its parentSpanId chain loops back to it): not a trace",
                        paths[file].as_ref().display(),
                        hex(&all[i].span_id)
                    );
                }
                Mark::Unseen => {
                    mark[i] = Mark::OnPath;
                    path.push(i);
                    match parent(i) {
                        Some(p) => i = p,
                        None => break None,
                    }
                }
            }
        };
        // Back down: the topmost stays the topmost.
        while let Some(j) = path.pop() {
            above = above.or(is_genai(&all[j]).then_some(j));
            mark[j] = Mark::Done(above);
        }
    }
    Ok((0..all.len())
        .map(|i| match parent(i).map(|p| mark[p]) {
            Some(Mark::Done(top)) => top,
            _ => None,
        })
        .collect())
}

/// Spans made into requests, attempts and outcomes.
fn assemble(read: Spans, seed: u64, paths: &[impl AsRef<Path>]) -> Result<Imported> {
    let tops = request_spans(&read, paths)?;
    let Spans {
        spans, origins, again, ..
    } = read;
    let mut requests: Vec<usize> = Vec::new();
    let mut attempts: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut skipped = again;
    for (i, span) in spans.iter().enumerate() {
        if !is_genai(span) {
            skipped += 1;
            continue;
        }
        match tops[i] {
            None => requests.push(i),
            Some(top) => attempts.entry(top).or_default().push(i),
        }
    }
    let start = requests
        .iter()
        .map(|&i| spans[i].start_time_unix_nano)
        .min()
        .unwrap_or(0);
    let ms = |nanos: u64| nanos.saturating_sub(start) / 1_000_000;
    let mut records: Vec<(u64, u8, Record)> = Vec::new();
    let mut ids = std::collections::HashSet::new();
    for &r in &requests {
        let span = &spans[r];
        let mut mine = attempts.remove(&r).unwrap_or_else(|| vec![r]);
        mine.sort_by_key(|&a| spans[a].start_time_unix_nano);
        if let Some(&late) = mine
            .iter()
            .chain([&r])
            .find(|&&i| ms(spans[i].end_time_unix_nano.max(spans[i].start_time_unix_nano)) > MAX_SPAN_MS)
        {
            let (file, line) = origins[late];
            bail!(
                "{}:{line}: span {} is more than {} days after the first request began: a traffic log spans at most that (are its times in nanoseconds since the Unix epoch?)",
                paths[file].as_ref().display(),
                hex(&spans[late].span_id),
                MAX_SPAN_MS / 86_400_000
            );
        }
        // A span id is a request's; one that two traces share is told
        // apart by its trace.
        let mut id = hex(&span.span_id);
        if !ids.insert(id.clone()) {
            id = format!("{}-{id}", hex(&span.trace_id));
            ids.insert(id.clone());
        }
        let id = LogId::text(id);
        let begun = ms(span.start_time_unix_nano);
        // Nothing of a request is before it began (a skewed clock's span).
        let mut mine: Vec<AttemptRec> = mine.iter().map(|&a| attempt(&spans[a], id.clone(), ms)).collect();
        mine.iter_mut().for_each(|a| a.t_ms = a.t_ms.max(begun));
        records.push((begun, 0, Record::Request(request(span, id.clone(), &mine, ms))));
        let mut o = outcome(span, id, &mine, ms);
        o.t_ms = o.t_ms.max(begun);
        records.extend(mine.into_iter().map(|a| (a.t_ms, 1, Record::Attempt(a))));
        records.push((o.t_ms, 2, Record::Outcome(o)));
    }
    records.sort_by_key(|(t, rank, _)| (*t, *rank));
    let started = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(start);
    let header = Record::Header(Header {
        v: VERSION,
        started_at: humantime::format_rfc3339_millis(started).to_string(),
        seed,
        tools: Default::default(),
    });
    Ok(Imported {
        records: std::iter::once(header)
            .chain(records.into_iter().map(|(_, _, r)| r))
            .collect(),
        requests: requests.len(),
        skipped,
    })
}

fn value<'a>(kv: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    kv.iter().find(|k| k.key == key)?.value.as_ref()?.value.as_ref()
}

fn text(kv: &[KeyValue], key: &str) -> Option<String> {
    match value(kv, key)? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        _ => None,
    }
}

fn int(kv: &[KeyValue], key: &str) -> Option<i64> {
    match value(kv, key)? {
        any_value::Value::IntValue(i) => Some(*i),
        any_value::Value::StringValue(s) => s.parse().ok(),
        any_value::Value::DoubleValue(d) => Some(*d as i64),
        _ => None,
    }
}

fn float(kv: &[KeyValue], key: &str) -> Option<f64> {
    match value(kv, key)? {
        any_value::Value::DoubleValue(d) => Some(*d),
        any_value::Value::IntValue(i) => Some(*i as f64),
        _ => None,
    }
}

fn texts(kv: &[KeyValue], key: &str) -> Vec<String> {
    match value(kv, key) {
        Some(any_value::Value::ArrayValue(a)) => a
            .values
            .iter()
            .filter_map(|v| match &v.value {
                Some(any_value::Value::StringValue(s)) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        Some(any_value::Value::StringValue(s)) => vec![s.clone()],
        _ => Vec::new(),
    }
}

/// A count of tokens as a log holds one.
fn tokens(kv: &[KeyValue], key: &str) -> u32 {
    int(kv, key).map_or(0, |n| n.clamp(0, i64::from(MAX_TOKENS)) as u32)
}

fn failed(s: &Span) -> bool {
    s.status.as_ref().is_some_and(|st| st.code == StatusCode::Error as i32)
}

fn request(span: &Span, id: LogId, attempts: &[AttemptRec], ms: impl Fn(u64) -> u64) -> RequestRec {
    let kv = &span.attributes;
    let op = text(kv, "gen_ai.operation.name").unwrap_or_default();
    let via = match op.as_str() {
        "invoke_agent" => Via::Agent,
        "execute_tool" => Via::Tool,
        "embeddings" => Via::Embeddings,
        _ => Via::Gateway,
    };
    let route = text(kv, "fusebox.route")
        .or_else(|| text(kv, "gen_ai.request.model"))
        .or_else(|| text(kv, "gen_ai.tool.name"))
        .unwrap_or_else(|| span.name.clone());
    let first_input = attempts.first().map_or(0, |a| a.input_tokens);
    let most_output = attempts.iter().map(|a| a.output_tokens).max().unwrap_or(0);
    RequestRec {
        t_ms: ms(span.start_time_unix_nano),
        id,
        user: text(kv, "fusebox.user")
            .or_else(|| text(kv, "enduser.id"))
            .or_else(|| text(kv, "user.id"))
            .unwrap_or_else(|| "otlp".into())
            .into(),
        sub_user: text(kv, "fusebox.sub_user").map(Into::into),
        // A conversation is a trace, where the span names none.
        session: text(kv, "fusebox.session")
            .or_else(|| text(kv, "gen_ai.conversation.id"))
            .or_else(|| text(kv, "session.id"))
            .unwrap_or_else(|| hex(&span.trace_id))
            .into(),
        route: route.into(),
        prompt_tokens: int(kv, "fusebox.prompt_tokens")
            .map_or(first_input, |n| n.clamp(0, i64::from(MAX_TOKENS)) as u32),
        max_tokens: int(kv, "gen_ai.request.max_tokens").map_or(
            if most_output > 0 {
                most_output
            } else {
                UNSAID_MAX_TOKENS
            },
            |n| n.clamp(0, i64::from(MAX_TOKENS)) as u32,
        ),
        tools: texts(kv, "fusebox.tools"),
        critical_tools: texts(kv, "fusebox.critical_tools"),
        max_steps: int(kv, "fusebox.max_steps").map(|n| n.clamp(0, 1000) as u32),
        messages: None,
        content_hash: None,
        answer_key: None,
        via,
        priority: text(kv, "fusebox.priority").and_then(|p| crate::config::Priority::parse(&p)),
        tenant: None,
        choices: int(kv, "gen_ai.request.choice.count")
            .filter(|&n| n > 1)
            .map(|n| n.min(i64::from(u32::MAX)) as u32),
        reach: None,
        stream: false,
    }
}

fn attempt(span: &Span, request: LogId, ms: impl Fn(u64) -> u64) -> AttemptRec {
    let kv = &span.attributes;
    let tool =
        text(kv, "gen_ai.tool.name").filter(|_| text(kv, "gen_ai.operation.name").as_deref() == Some("execute_tool"));
    let target = match &tool {
        Some(name) => Target::tool(name),
        None => text(kv, "fusebox.target")
            .and_then(|t| t.parse::<Target>().ok())
            .filter(Target::has_fault)
            .unwrap_or_else(|| {
                let p = text(kv, "gen_ai.provider.name").or_else(|| text(kv, "gen_ai.system"));
                Target::provider(&p.unwrap_or_else(|| "otlp".into()))
            }),
    };
    let error = text(kv, "error.type");
    let transport = match error.as_deref() {
        Some("timeout") => Some(Transport::Timeout),
        Some("connect") => Some(Transport::Connect),
        Some("reset") => Some(Transport::Reset),
        Some("truncated") => Some(Transport::Truncated),
        _ => None,
    };
    let status = int(kv, "http.response.status_code")
        .and_then(|s| u16::try_from(s).ok())
        .or_else(|| error.as_deref().and_then(|e| e.parse().ok()))
        .or_else(|| match (transport, failed(span)) {
            (Some(_), _) => None,
            (None, true) => Some(500),
            (None, false) => Some(200),
        });
    let cut = text(kv, "fusebox.cut").and_then(|c| crate::telemetry::events::Cut::named(&c));
    AttemptRec {
        t_ms: ms(span.end_time_unix_nano),
        request,
        target,
        model: tool
            .is_none()
            .then(|| text(kv, "fusebox.model").or_else(|| text(kv, "gen_ai.request.model")))
            .flatten()
            .map(Into::into),
        status,
        transport,
        latency_ms: span.end_time_unix_nano.saturating_sub(span.start_time_unix_nano) / 1_000_000,
        input_tokens: tokens(kv, "gen_ai.usage.input_tokens"),
        output_tokens: tokens(kv, "gen_ai.usage.output_tokens"),
        headers: Default::default(),
        semantic_failure: text(kv, "fusebox.semantic_failure")
            .or_else(|| (status == Some(200) && error.as_deref() == Some("semantic")).then(|| "semantic".into())),
        tool_calls: texts(kv, "fusebox.tool_calls"),
        tool_keys: Vec::new(),
        answer: None,
        response_id: text(kv, "gen_ai.response.id"),
        cut,
        cost_usd: cut.and(float(kv, "fusebox.cost_usd")),
    }
}

fn outcome(span: &Span, request: LogId, attempts: &[AttemptRec], ms: impl Fn(u64) -> u64) -> OutcomeRec {
    let kv = &span.attributes;
    let ok = |a: &AttemptRec| a.status == Some(200) && a.semantic_failure.is_none();
    let level = text(kv, "fusebox.level")
        .and_then(|l| Level::ALL.into_iter().find(|x| x.as_str() == l))
        .unwrap_or(if failed(span) || !attempts.iter().any(ok) {
            Level::Failed
        } else {
            Level::None
        });
    let chain = match texts(kv, "fusebox.chain") {
        c if !c.is_empty() => c,
        _ => attempts
            .iter()
            .map(|a| {
                let name = a.model.as_deref().map_or_else(|| a.target.to_string(), str::to_string);
                format!("{name} {}", if ok(a) { "✓" } else { "✗" })
            })
            .collect(),
    };
    let sum: u64 = attempts
        .iter()
        .map(|a| u64::from(a.input_tokens) + u64::from(a.output_tokens))
        .sum();
    OutcomeRec {
        t_ms: ms(span.end_time_unix_nano).max(attempts.iter().map(|a| a.t_ms).max().unwrap_or(0)),
        request,
        level,
        chain,
        quality: float(kv, "fusebox.quality").unwrap_or(if level == Level::Failed { 0.0 } else { 1.0 }),
        tokens: int(kv, "fusebox.tokens").map_or(sum, |n| n.max(0) as u64),
        cost_usd: float(kv, "fusebox.cost_usd").unwrap_or(0.0),
        missing: texts(kv, "fusebox.missing"),
        key: text(kv, "fusebox.request.key").map(Into::into),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write as _;

    /// An OTLP/JSON span: `id` and `parent` (0: none) as span ids,
    /// a GenAI span when `genai`.
    fn span(id: u64, parent: u64, genai: bool) -> String {
        let parent = if parent == 0 {
            String::new()
        } else {
            format!("{parent:016x}")
        };
        let attrs = if genai {
            r#"[{"key":"gen_ai.request.model","value":{"stringValue":"gpt-4o"}}]"#
        } else {
            "[]"
        };
        format!(
            r#"{{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"{id:016x}","parentSpanId":"{parent}","name":"s{id}","startTimeUnixNano":"{t}","endTimeUnixNano":"{t}","attributes":{attrs}}}"#,
            t = 1_700_000_000_000_000_000u64 + id
        )
    }

    fn file(spans: &[String]) -> tempfile::NamedTempFile {
        let mut text = String::from(r#"{"resourceSpans":[{"scopeSpans":[{"spans":["#);
        for (i, s) in spans.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(s);
        }
        text.push_str("]}]}]}\n");
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[test]
    fn a_cycle_of_parents_is_refused_naming_the_file_and_line() {
        // 1 ← 2 ← 3 ← 1: no root at all.
        let f = file(&[span(1, 3, true), span(2, 1, false), span(3, 2, true)]);
        let e = read(&[f.path()]).err().unwrap().to_string();
        assert!(e.contains(&format!("{}:1:", f.path().display())), "{e}");
        assert!(e.contains("is its own ancestor"), "{e}");
        // A span its own parent, too.
        let f = file(&[span(4, 4, true)]);
        assert!(read(&[f.path()]).err().unwrap().to_string().contains("own ancestor"));
    }

    #[test]
    fn a_span_without_its_ids_is_refused_with_its_line() {
        let mut text = String::from("{\"resourceSpans\":[]}\n");
        let empty = span(1, 0, true).replace("0000000000000001", "");
        writeln!(
            text,
            r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{empty}]}}]}}]}}"#
        )
        .unwrap();
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        let e = read(&[f.path()]).err().unwrap().to_string();
        assert!(
            e.contains(&format!("{}:2: span `s1` has no valid ids", f.path().display())),
            "{e}"
        );
    }

    /// What an error quotes of the input is cut short: a megabyte span
    /// id, or a megabyte string where a list belongs, is said by its start
    /// and its length.
    #[test]
    fn an_error_quotes_at_most_a_short_part_of_the_input() {
        let huge = "ab".repeat(500_000);
        let id = r#""spanId":"0000000000000001""#;
        let f = file(&[span(1, 0, true).replace(id, &format!(r#""spanId":"{huge}""#))]);
        let e = format!("{:#}", read(&[f.path()]).err().unwrap());
        let start: String = e.chars().take(300).collect();
        assert!(e.len() < 1_000, "{} bytes: {start}", e.len());
        assert!(e.contains("has no valid ids") && e.contains("… (1000000 chars)"), "{e}");
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), format!(r#"{{"resourceSpans":"{}"}}"#, "x".repeat(1_000_000))).unwrap();
        let e = format!("{:#}", read(&[f.path()]).err().unwrap());
        let start: String = e.chars().take(300).collect();
        assert!(e.len() < 1_000, "{} bytes: {start}", e.len());
        assert!(
            e.contains("not OTLP/JSON traces") && e.contains("… (1000000 chars)"),
            "{e}"
        );
    }

    #[test]
    fn a_chain_100k_spans_deep_is_one_request_with_its_genai_leaf_as_its_attempt() {
        // A GenAI root, 100,000 spans under one another, a GenAI leaf:
        // each span is visited once (a walk to the root from every span
        // would take 5 billion steps).
        const DEPTH: u64 = 100_000;
        let mut spans: Vec<String> = (1..=DEPTH).map(|i| span(i, i - 1, i == 1 || i == DEPTH)).collect();
        spans.reverse();
        let f = file(&spans);
        let imported = read(&[f.path()]).unwrap();
        assert_eq!((imported.requests, imported.skipped), (1, DEPTH as usize - 2));
        let attempts: Vec<_> = imported
            .records
            .iter()
            .filter_map(|r| match r {
                Record::Attempt(a) => Some(a.request.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            attempts,
            [LogId::text(format!("{:016x}", 1))],
            "the leaf is the root's attempt"
        );
    }
}
