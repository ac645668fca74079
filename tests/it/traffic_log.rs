//! Traffic log v1: fixtures, error messages, skip/torn/empty handling, round
//! trips, a fuzz-style property and a streaming test.

use fusebox::command::Command;
use fusebox::outcome::Level;
use fusebox::provider::Message;
use fusebox::resilience::breaker::BreakerState;
use fusebox::target::Target;
use fusebox::traffic::log::{
    AttemptRec, Header, LogError, LogId, LogReader, OperatorRec, OutcomeRec, Record, RequestRec, TransitionRec,
    Transport, MAX_LINE_BYTES, VERSION,
};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/logs")
        .join(name)
}

/// Reads every record, or the first error.
fn read_all(path: &Path, skip: bool) -> Result<(LogReader, Vec<Record>), LogError> {
    let mut reader = LogReader::open(path, skip)?;
    let mut out = Vec::new();
    while let Some(rec) = reader.next_record()? {
        out.push(rec);
    }
    Ok((reader, out))
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn request(t_ms: u64, id: u64, user: &str) -> RequestRec {
    RequestRec {
        t_ms,
        id: id.into(),
        user: user.into(),
        sub_user: None,
        session: format!("s-{id}").into(),
        route: "chat".into(),
        prompt_tokens: 10,
        max_tokens: 10,
        tools: vec![],
        critical_tools: vec![],
        max_steps: None,
        messages: None,
        content_hash: None,
        answer_key: None,
        via: Default::default(),
        priority: None,
        tenant: None,
        choices: None,
        reach: None,
        stream: false,
    }
}

#[test]
fn all_kinds_reads_every_kind_and_skips_unknown_ones() {
    let (reader, recs) = read_all(&fixture("all_kinds.jsonl"), false).unwrap();
    assert_eq!(
        reader.header(),
        Some(&Header {
            v: VERSION,
            started_at: "2025-11-29T14:00:00Z".into(),
            seed: 42,
            tools: Default::default(),
        })
    );
    let mut args = serde_json::Map::new();
    args.insert(
        "fault".into(),
        serde_json::json!({"fault": {"type": "status", "code": 503}, "rate": 0.5}),
    );
    let expected = vec![
        Record::Request(RequestRec {
            t_ms: 0,
            id: 1.into(),
            user: "alice".into(),
            sub_user: None,
            session: "s-1".into(),
            route: "chat".into(),
            prompt_tokens: 1200,
            max_tokens: 400,
            tools: strings(&["search", "calc"]),
            critical_tools: strings(&["search"]),
            max_steps: Some(4),
            messages: None,
            content_hash: Some("sha256:9f2c".into()),
            answer_key: None,
            via: Default::default(),
            priority: None,
            tenant: None,
            choices: None,
            reach: None,
            stream: false,
        }),
        Record::Attempt(AttemptRec {
            t_ms: 5,
            request: 1.into(),
            target: "provider:openai".parse().unwrap(),
            model: Some("gpt-4o".into()),
            status: Some(429),
            transport: None,
            latency_ms: 38,
            input_tokens: 0,
            output_tokens: 0,
            headers: BTreeMap::from([
                ("retry-after".to_string(), "2".to_string()),
                ("x-ratelimit-remaining-tokens".to_string(), "0".to_string()),
            ]),
            semantic_failure: None,
            tool_calls: vec![],
            tool_keys: Vec::new(),
            answer: None,
            response_id: None,
            cut: None,
            cost_usd: None,
        }),
        Record::Attempt(AttemptRec {
            t_ms: 50,
            request: 1.into(),
            target: "provider:anthropic".parse().unwrap(),
            model: Some("claude-haiku".into()),
            status: Some(200),
            transport: None,
            latency_ms: 410,
            input_tokens: 1200,
            output_tokens: 96,
            headers: BTreeMap::new(),
            semantic_failure: None,
            tool_calls: strings(&["search"]),
            tool_keys: Vec::new(),
            answer: None,
            response_id: None,
            cut: None,
            cost_usd: None,
        }),
        Record::Attempt(AttemptRec {
            t_ms: 470,
            request: 1.into(),
            target: "tool:search".parse().unwrap(),
            model: None,
            status: None,
            transport: Some(Transport::Timeout),
            latency_ms: 2000,
            input_tokens: 0,
            output_tokens: 0,
            headers: BTreeMap::new(),
            semantic_failure: None,
            tool_calls: vec![],
            tool_keys: Vec::new(),
            answer: None,
            response_id: None,
            cut: None,
            cost_usd: None,
        }),
        Record::Transition(TransitionRec {
            t_ms: 2470,
            breaker: Target::tool("search"),
            from: BreakerState::Closed,
            to: BreakerState::Open,
            reason: "5 failures in 10s".into(),
        }),
        Record::Outcome(OutcomeRec {
            t_ms: 2480,
            request: 1.into(),
            level: Level::Partial,
            chain: strings(&["gpt-4o ✗429", "claude-haiku ✓", "search ✗timeout"]),
            quality: 0.7,
            tokens: 1296,
            cost_usd: 0.00042,
            missing: strings(&["search"]),
            key: None,
        }),
        Record::Operator(OperatorRec {
            t_ms: 3000,
            action: "set_fault".into(),
            target: "provider:openai".into(),
            args: Some(args),
            by: "console".into(),
        }),
        Record::Request(RequestRec {
            prompt_tokens: 300,
            max_tokens: 200,
            messages: Some(vec![Message::user("hi")]),
            ..request(3000, 2, "bob")
        }),
        Record::Attempt(AttemptRec {
            t_ms: 3100,
            request: 2.into(),
            target: "provider:anthropic".parse().unwrap(),
            model: Some("claude-haiku".into()),
            status: Some(200),
            transport: None,
            latency_ms: 90,
            input_tokens: 300,
            output_tokens: 12,
            headers: BTreeMap::new(),
            semantic_failure: Some("malformed tool call".into()),
            tool_calls: vec![],
            tool_keys: Vec::new(),
            answer: None,
            response_id: None,
            cut: None,
            cost_usd: None,
        }),
        Record::Operator(OperatorRec {
            t_ms: 3200,
            action: "reset".into(),
            target: "tool:search".into(),
            args: None,
            by: "api".into(),
        }),
    ];
    assert_eq!(recs, expected);
    assert_eq!(reader.unknown_kinds(), 1);
    assert_eq!(reader.bad_lines(), 0);
    assert_eq!(reader.torn_lines(), 0);
    assert_eq!(reader.line_no(), 12);
}

#[test]
fn a_log_without_header_is_accepted_with_times_from_its_first_record() {
    let (reader, recs) = read_all(&fixture("no_header.jsonl"), false).unwrap();
    assert_eq!(reader.header(), None);
    // Written at 1000, 1010 and 1030 ms.
    let kinds: Vec<_> = recs.iter().map(|r| (r.kind(), r.t_ms())).collect();
    assert_eq!(kinds, [("request", 0), ("attempt", 10), ("outcome", 30)]);
    assert_eq!(
        fusebox::traffic::log::length_ms(&[fixture("no_header.jsonl")]),
        Some(30)
    );
    assert_eq!(
        fusebox::traffic::log::length_ms(&[fixture("all_kinds.jsonl")]),
        Some(3200),
        "with a header, times are as written"
    );
    assert_eq!(
        recs[0],
        Record::Request(RequestRec {
            session: "s-7".into(),
            prompt_tokens: 50,
            max_tokens: 20,
            tools: strings(&["calc"]),
            ..request(0, 7, "carol")
        })
    );
}

#[test]
fn a_torn_last_line_is_skipped_with_or_without_skip_bad_lines() {
    for skip in [false, true] {
        let (reader, recs) = read_all(&fixture("torn_last_line.jsonl"), skip).unwrap();
        assert!(reader.header().is_some());
        assert_eq!(recs, [Record::Request(request(0, 1, "alice"))]);
        assert_eq!(reader.torn_lines(), 1);
        assert_eq!(reader.bad_lines(), 0);
        assert_eq!(reader.line_no(), 3);
    }
}

#[test]
fn an_empty_file_is_an_error() {
    let path = fixture("empty.jsonl");
    for skip in [false, true] {
        let err = LogReader::open(&path, skip).unwrap_err();
        assert!(matches!(err, LogError::Empty { .. }), "{err:?}");
        assert_eq!(err.to_string(), format!("{}: empty log (no lines)", path.display()));
    }
}

#[test]
fn a_missing_file_is_an_io_error_naming_it() {
    let path = fixture("does_not_exist.jsonl");
    let err = LogReader::open(&path, false).unwrap_err();
    assert!(matches!(err, LogError::Io { .. }), "{err:?}");
    assert!(err.to_string().starts_with(&format!("{}: ", path.display())), "{err}");
}

/// (fixture, line, field, message) for every bad-input fixture.
const BAD: &[(&str, u64, &str, &str)] = &[
    ("not_json.jsonl", 3, "", "not JSON: expected ident at column 2"),
    (
        "wrong_type.jsonl",
        3,
        "latency_ms",
        "invalid type: string \"fast\", expected u64",
    ),
    ("t_ms_backwards.jsonl", 4, "t_ms", "goes backwards (1200 after 1500)"),
    (
        "unknown_request.jsonl",
        3,
        "request",
        "unknown request 99 (no earlier request line)",
    ),
    (
        "bad_action.jsonl",
        3,
        "action",
        "unknown action `explode`, expected one of force_open, force_closed, disable, reset, freeze_refill, \
         unfreeze_refill, set_fault, drill_on, drill_off, reload, reset_spend_rate",
    ),
    (
        "bad_fault.jsonl",
        3,
        "args.fault",
        "set_fault needs its fault, e.g. {\"fault\":{\"fault\":{\"type\":\"status\",\"code\":503},\"rate\":0.5}}",
    ),
    (
        "bad_transport.jsonl",
        3,
        "transport",
        "unknown variant `slow`, expected one of `timeout`, `connect`, `reset`, `truncated`",
    ),
];

#[test]
fn bad_lines_stop_reading_with_file_line_and_field() {
    for &(name, line_no, field_name, msg) in BAD {
        let path = fixture(name);
        let mut reader = LogReader::open(&path, false).unwrap();
        let mut good = 0;
        let err = loop {
            match reader.next_record() {
                Ok(Some(_)) => good += 1,
                Ok(None) => panic!("{name}: no error"),
                Err(e) => break e,
            }
        };
        let LogError::BadLine {
            path: p,
            line,
            field,
            message,
        } = &err
        else {
            panic!("{name}: {err:?}");
        };
        assert_eq!(
            (p, *line, field.as_str(), message.as_str()),
            (&path, line_no, field_name, msg)
        );
        let shown = if field_name.is_empty() {
            format!("{}:{line_no}: {msg}", path.display())
        } else {
            format!("{}:{line_no}: field `{field_name}`: {msg}", path.display())
        };
        assert_eq!(err.to_string(), shown);
        // Everything before the bad line was delivered; nothing after it.
        assert_eq!(good, line_no - 2, "{name}");
        assert!(
            reader.next_record().unwrap().is_none(),
            "{name}: reader is finished after an error"
        );
        assert!(reader.next().is_none());
    }
}

#[test]
fn skip_bad_lines_skips_and_counts_them() {
    for &(name, ..) in BAD {
        let (reader, recs) = read_all(&fixture(name), true).unwrap();
        let ids: Vec<_> = recs
            .iter()
            .filter_map(|r| match r {
                Record::Request(q) => Some(q.id.n()),
                _ => None,
            })
            .collect();
        assert_eq!(ids, [1, 2], "{name}");
        assert_eq!(reader.bad_lines(), 1, "{name}");
        assert_eq!(reader.torn_lines(), 0, "{name}");
        assert!(reader.header().is_some(), "{name}");
    }
}

#[test]
fn the_iterator_yields_records_then_the_error_then_stops() {
    let reader = LogReader::open(&fixture("t_ms_backwards.jsonl"), false).unwrap();
    let items: Vec<_> = reader.collect();
    assert_eq!(items.len(), 3);
    assert!(items[0].is_ok() && items[1].is_ok());
    assert!(matches!(&items[2], Err(LogError::BadLine { line: 4, .. })));
}

/// What a reader makes of `bytes`: the records (outcomes left out), the
/// first error, and the counts of bad, unknown and torn lines; with
/// `check_only`, outcome lines are only checked.
fn read_less_outcomes(bytes: &[u8], skip: bool, check_only: bool) -> (Vec<Record>, Option<String>, [u64; 3]) {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(bytes).unwrap();
    f.flush().unwrap();
    let mut reader = match LogReader::open(f.path(), skip) {
        Ok(r) => r,
        Err(e) => {
            return (
                Vec::new(),
                Some(e.to_string().replace(&*f.path().to_string_lossy(), "LOG")),
                [0; 3],
            )
        }
    };
    if check_only {
        reader.check_only_outcomes();
    }
    let mut recs = Vec::new();
    let err = loop {
        match reader.next_record() {
            Ok(Some(Record::Outcome(_))) => assert!(!check_only, "an outcome was returned"),
            Ok(Some(r)) => recs.push(r),
            Ok(None) => break None,
            Err(e) => break Some(e.to_string().replace(&*f.path().to_string_lossy(), "LOG")),
        }
    };
    (
        recs,
        err,
        [reader.bad_lines(), reader.unknown_kinds(), reader.torn_lines()],
    )
}

#[test]
fn outcome_lines_only_checked_fail_as_they_do_when_read() {
    let outcome = |rest: &str| format!(r#"{{"kind":"outcome","t_ms":5,"request":1{rest}}}"#);
    let good = outcome(r#","level":"none","chain":["m ✓","a\"b"],"quality":1,"tokens":3,"cost_usd":0.5,"missing":[]"#);
    let cases = [
        (good.clone(), None),
        (good.replace(r#""t_ms":5"#, r#""t_ms":0"#), Some("field `t_ms`")),
        (
            good.replace(r#""request":1"#, r#""request":7"#),
            Some("field `request`"),
        ),
        (good.replace(r#"["m ✓","a\"b"]"#, r#"["m",2]"#), Some("field `chain`")),
        (
            good.replace(r#""missing":[]"#, r#""missing":"x""#),
            Some("field `missing`"),
        ),
        (good.replace(r#","quality":1"#, ""), Some("field `quality`: missing")),
        (
            good.replace(r#""level":"none""#, r#""level":"odd""#),
            Some("field `level`"),
        ),
        (good.replace('}', ",}"), Some("not JSON")),
    ];
    for (line, problem) in cases {
        // Requests 1 and 2 (at 1 ms), the outcome line, request 3.
        let text = format!(
            "{HDR}\n{REQ1}\n{}\n{line}\n{}\n",
            Record::Request(request(1, 2, "bob")).to_line(),
            Record::Request(request(9, 3, "eve")).to_line()
        );
        for skip in [false, true] {
            let read = read_less_outcomes(text.as_bytes(), skip, false);
            let checked = read_less_outcomes(text.as_bytes(), skip, true);
            assert_eq!(checked, read, "{line}");
            match (problem, &read.1) {
                (None, None) => assert_eq!(read.0.len(), 3, "{line}"),
                (Some(p), Some(err)) => {
                    assert!(!skip && err.starts_with("LOG:4: ") && err.contains(p), "{line}: {err}")
                }
                (Some(_), None) => assert!(skip && read.2[0] == 1, "{line}: {read:?}"),
                (None, Some(err)) => panic!("{line}: {err}"),
            }
        }
    }
}

/// Writes `text` to a temp file and reads it.
fn read_text(text: &str, skip: bool) -> (tempfile::NamedTempFile, Result<(LogReader, Vec<Record>), LogError>) {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f.flush().unwrap();
    let out = read_all(f.path(), skip);
    (f, out)
}

fn bad_line_of(r: Result<(LogReader, Vec<Record>), LogError>) -> (u64, String, String) {
    match r {
        Err(LogError::BadLine {
            line, field, message, ..
        }) => (line, field, message),
        Err(e) => panic!("not a bad line: {e}"),
        Ok((_, recs)) => panic!("no error: {recs:?}"),
    }
}

const REQ1: &str = r#"{"kind":"request","t_ms":0,"id":1,"user":"alice","session":"s-1","route":"chat","prompt_tokens":10,"max_tokens":10,"tools":[]}"#;
const HDR: &str = r#"{"kind":"header","v":1,"started_at":"2025-11-29T14:00:00Z","seed":1}"#;

#[test]
fn other_bad_lines_name_their_field() {
    let cases: &[(&str, &str, &str)] = &[
        // a header that is not first
        (HDR, "kind", "a header is only allowed on the first line"),
        (r#"{"t_ms":1}"#, "kind", "missing"),
        (r#"{"kind":7}"#, "kind", "must be a string, not 7"),
        ("[1,2]", "", "not a JSON object"),
        (
            r#"{"kind":"attempt","t_ms":1,"request":1,"target":"mock","status":200,"transport":null,"latency_ms":1,"input_tokens":1,"output_tokens":1}"#,
            "target",
            "`mock` is not `provider:NAME` or `tool:NAME`",
        ),
        (
            r#"{"kind":"attempt","t_ms":1,"request":1,"target":"provider:m","status":200,"transport":null,"latency_ms":1,"input_tokens":1}"#,
            "output_tokens",
            "missing",
        ),
        (
            r#"{"kind":"attempt","t_ms":1,"request":1,"target":"provider:m","status":99999,"transport":null,"latency_ms":1,"input_tokens":1,"output_tokens":1}"#,
            "status",
            "invalid value: integer `99999`, expected u16",
        ),
        (
            r#"{"kind":"outcome","t_ms":1,"request":1,"level":"meh","chain":[],"quality":1,"tokens":0,"cost_usd":0,"missing":[]}"#,
            "level",
            "unknown variant `meh`, expected one of `none`, `partial`, `fallback`, `deferred`, `failed`",
        ),
        (
            r#"{"kind":"request","t_ms":1,"id":1,"user":"a","session":"s","route":"r","prompt_tokens":1,"max_tokens":1,"tools":[]}"#,
            "id",
            "duplicate request id 1",
        ),
        (
            r#"{"kind":"attempt","t_ms":1,"request":"1","target":"provider:m","status":200,"transport":null,"latency_ms":1,"input_tokens":1,"output_tokens":1}"#,
            "request",
            r#"unknown request "1" (no earlier request line)"#,
        ),
        (
            r#"{"kind":"request","t_ms":1,"id":-3,"user":"a","session":"s","route":"r","prompt_tokens":1,"max_tokens":1,"tools":[]}"#,
            "id",
            "-3 is negative; an id is a string or a whole number",
        ),
        (
            r#"{"kind":"outcome","t_ms":1,"request":{"id":1},"level":"none","chain":[],"quality":1,"tokens":0,"cost_usd":0,"missing":[]}"#,
            "request",
            "invalid type: map, expected a string or a whole number",
        ),
        (
            r#"{"kind":"transition","t_ms":1,"t_ms":2,"breaker":"b","from":"closed","to":"open","reason":"r"}"#,
            "t_ms",
            "duplicate field `t_ms` at column 36",
        ),
        (
            r#"{"kind":"operator","t_ms":-1,"action":"reset","target":"x","by":"me"}"#,
            "t_ms",
            "invalid value: integer `-1`, expected u64",
        ),
    ];
    for &(line, field, message) in cases {
        let (_f, r) = read_text(&format!("{HDR}\n{REQ1}\n{line}\n"), false);
        assert_eq!(bad_line_of(r), (3, field.to_string(), message.to_string()), "{line}");
    }
}

#[test]
fn a_header_with_another_version_is_rejected() {
    let (_f, r) = read_text(&format!("{}\n{REQ1}\n", HDR.replace("\"v\":1", "\"v\":2")), false);
    assert_eq!(
        bad_line_of(r),
        (
            1,
            "v".to_string(),
            "unsupported version 2 (this reader reads 1)".to_string()
        )
    );
    let (_f, r) = read_text(&format!("{}\n{REQ1}\n", HDR.replace("\"v\":1", "\"v\":2")), true);
    let (reader, recs) = r.unwrap();
    assert_eq!((reader.header(), recs.len(), reader.bad_lines()), (None, 1, 1));
}

#[test]
fn blank_lines_crlf_and_a_final_line_without_newline_are_fine() {
    let (_f, r) = read_text(
        &format!("\n{HDR}\r\n\n  \n{REQ1}\r\n\n{}", REQ1.replace("\"id\":1", "\"id\":2")),
        false,
    );
    let (reader, recs) = r.unwrap();
    assert!(reader.header().is_some());
    assert_eq!(recs.len(), 2);
    assert_eq!((reader.torn_lines(), reader.line_no()), (0, 7));
}

#[test]
fn a_file_of_blank_lines_is_empty_and_a_lone_torn_line_yields_nothing() {
    let (_f, r) = read_text("\n \n\n", false);
    assert!(matches!(r, Err(LogError::Empty { .. })));
    let (_f, r) = read_text(r#"{"kind":"header","v":1,"sta"#, false);
    let (reader, recs) = r.unwrap();
    assert!(recs.is_empty());
    assert_eq!((reader.header(), reader.torn_lines()), (None, 1));
}

#[test]
fn a_not_json_line_with_a_newline_is_bad_not_torn() {
    let (_f, r) = read_text(&format!("{REQ1}\n{{\"kind\":\"req\n"), false);
    let (line, field, _) = bad_line_of(r);
    assert_eq!((line, field.as_str()), (2, ""));
}

#[test]
fn an_overlong_line_is_a_bad_line_without_being_buffered() {
    let mut text = format!("{REQ1}\n{{\"kind\":\"x\",\"pad\":\"");
    text.push_str(&"a".repeat(MAX_LINE_BYTES));
    text.push_str("\"}\n");
    text.push_str(&REQ1.replace("\"id\":1", "\"id\":2"));
    text.push('\n');
    let open = |skip| LogReader::from_reader("big.jsonl", std::io::Cursor::new(text.clone().into_bytes()), skip);
    let mut reader = open(false).unwrap();
    assert!(reader.next_record().unwrap().is_some());
    let err = reader.next_record().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("big.jsonl:2: line longer than {MAX_LINE_BYTES} bytes")
    );
    let reader = open(true).unwrap();
    assert_eq!(reader.filter(|r| r.is_ok()).count(), 2);
}

#[test]
fn to_line_skips_empty_optionals_and_keeps_nullable_fields() {
    let line = Record::Request(request(3, 1, "a")).to_line();
    assert_eq!(
        line,
        r#"{"kind":"request","t_ms":3,"id":1,"user":"a","session":"s-1","route":"chat","prompt_tokens":10,"max_tokens":10,"tools":[]}"#
    );
    let line = Record::Attempt(AttemptRec {
        t_ms: 4,
        request: 1.into(),
        target: "tool:calc".parse().unwrap(),
        model: None,
        status: None,
        transport: Some(Transport::Reset),
        latency_ms: 2,
        input_tokens: 0,
        output_tokens: 0,
        headers: BTreeMap::new(),
        semantic_failure: None,
        tool_calls: vec![],
        tool_keys: Vec::new(),
        answer: None,
        response_id: None,
        cut: None,
        cost_usd: None,
    })
    .to_line();
    assert_eq!(
        line,
        r#"{"kind":"attempt","t_ms":4,"request":1,"target":"tool:calc","status":null,"transport":"reset","latency_ms":2,"input_tokens":0,"output_tokens":0}"#
    );
    assert!(!line.contains('\n'));
    assert_eq!(
        Record::Header(Header {
            v: VERSION,
            started_at: "x".into(),
            seed: 9,
            tools: Default::default(),
        })
        .t_ms(),
        0
    );
}

// ---- property tests ----

fn name() -> impl Strategy<Value = String> {
    "[a-z:_\\-]{0,8}"
}

/// A provider or tool (what an attempt calls), any name.
fn called() -> impl Strategy<Value = Target> {
    (any::<bool>(), "[a-z:_\\-]{1,8}").prop_map(|(p, n)| if p { Target::provider(&n) } else { Target::tool(&n) })
}

fn state() -> impl Strategy<Value = BreakerState> {
    use BreakerState::*;
    prop::sample::select(vec![Closed, Open, HalfOpen, ForcedOpen, ForcedClosed, Disabled])
}

fn text() -> impl Strategy<Value = String> {
    // Includes quotes, backslashes, newlines and non-ASCII: all must be escaped.
    "(?s).{0,12}"
}

fn role() -> impl Strategy<Value = fusebox::wire::Role> {
    use fusebox::wire::Role;
    prop_oneof![
        Just(Role::System),
        Just(Role::Developer),
        Just(Role::User),
        Just(Role::Assistant),
        Just(Role::Tool)
    ]
}

/// Floats that print and parse back exactly.
fn exact_f64() -> impl Strategy<Value = f64> {
    (0u32..=1_000_000).prop_map(|n| f64::from(n) / 1000.0)
}

#[test]
fn string_ids_are_kept_as_written_and_told_apart_from_numbers() {
    let req = |id: &str| {
        format!(
            r#"{{"kind":"request","t_ms":1,"id":{id},"user":"a","session":"s","route":"r","prompt_tokens":1,"max_tokens":1,"tools":[]}}"#
        )
    };
    let outcome = |id: &str| {
        format!(
            r#"{{"kind":"outcome","t_ms":2,"request":{id},"level":"none","chain":[],"quality":1.0,"tokens":0,"cost_usd":0.0,"missing":[]}}"#
        )
    };
    let uuid = r#""3f2b0c7e-1d2a-4c55-9a8e-1b2c3d4e5f60""#;
    let ids = [r#""r0""#, uuid, r#""chatcmpl-9xZ""#, r#""42""#, "42"];
    let mut text = format!("{HDR}\n");
    for id in ids {
        text += &(req(id) + "\n");
    }
    for id in ids.iter().rev() {
        text += &(outcome(id) + "\n");
    }
    let (_f, r) = read_text(&text, false);
    let (_, recs) = r.unwrap();
    let written: Vec<_> = recs
        .iter()
        .map(|r| match r {
            Record::Request(q) => (q.id.to_string(), q.id.n()),
            Record::Outcome(o) => (o.request.to_string(), o.request.n()),
            other => panic!("{other:?}"),
        })
        .collect();
    // A string runs under its request's place in the log, a number under its value.
    let numbered: Vec<_> = ids
        .iter()
        .zip([1, 2, 3, 4, 42])
        .map(|(id, n)| (id.to_string(), n))
        .collect();
    let mut both = numbered.clone();
    both.extend(numbered.into_iter().rev());
    assert_eq!(written, both, "each outcome finds its own request, as written");
    let back: String = recs.iter().map(|r| r.to_line() + "\n").collect();
    assert_eq!(back, text.split_once('\n').unwrap().1, "written back unchanged");

    // Where that number is taken, a fresh one.
    let (_f, r) = read_text(
        &format!("{HDR}\n{}\n{}\n{}\n", req(r#""a""#), req("1"), outcome("1")),
        false,
    );
    let from = fusebox::traffic::log::STRING_IDS_FROM;
    let ns: Vec<_> = r
        .unwrap()
        .1
        .iter()
        .map(|r| match r {
            Record::Request(q) => (q.id.to_string(), q.id.n()),
            Record::Outcome(o) => (o.request.to_string(), o.request.n()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ns, [("\"a\"".to_string(), 1), ("1".into(), from), ("1".into(), from)]);

    let (_f, r) = read_text(&format!("{HDR}\n{}\n{}\n", req(uuid), req(uuid)), false);
    assert_eq!(bad_line_of(r), (3, "id".into(), format!("duplicate request id {uuid}")));
}

/// Request ids as logs write them: numbers, and strings of any kind.
fn arb_id() -> impl Strategy<Value = LogId> {
    prop_oneof![
        (0..fusebox::traffic::log::STRING_IDS_FROM).prop_map(LogId::from),
        "[^\\p{C}]{1,40}".prop_map(LogId::text),
    ]
}

fn arb_record() -> impl Strategy<Value = Record> {
    let header = (any::<u32>(), text(), any::<u64>()).prop_map(|(v, started_at, seed)| {
        Record::Header(Header {
            v,
            started_at,
            seed,
            tools: Default::default(),
        })
    });
    let request = (
        (any::<u64>(), arb_id(), text(), text(), name()),
        (any::<u32>(), any::<u32>(), prop::collection::vec(name(), 0..3)),
        (
            prop::collection::vec(name(), 0..2),
            any::<Option<u32>>(),
            prop::option::of(prop::collection::vec((role(), text()), 0..2)),
            prop::option::of(text()),
        ),
    )
        .prop_map(
            |((t_ms, id, user, session, route), (prompt_tokens, max_tokens, tools), (crit, max_steps, msgs, hash))| {
                Record::Request(RequestRec {
                    t_ms,
                    id,
                    user: user.into(),
                    sub_user: None,
                    session: session.into(),
                    route: route.into(),
                    prompt_tokens,
                    max_tokens,
                    tools,
                    critical_tools: crit,
                    max_steps,
                    messages: msgs.map(|m| m.into_iter().map(|(r, c)| Message::new(r, c)).collect()),
                    content_hash: hash,
                    answer_key: None,
                    via: Default::default(),
                    priority: None,
                    tenant: None,
                    choices: None,
                    reach: None,
                    stream: false,
                })
            },
        );
    let transport = prop::option::of(prop_oneof![
        Just(Transport::Timeout),
        Just(Transport::Connect),
        Just(Transport::Reset),
        Just(Transport::Truncated)
    ]);
    let attempt = (
        (any::<u64>(), arb_id(), called(), prop::option::of(name())),
        (
            any::<Option<u16>>(),
            transport,
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
        ),
        (
            prop::collection::btree_map(name(), text(), 0..3),
            prop::option::of(text()),
            prop::collection::vec(name(), 0..3),
        ),
    )
        .prop_map(
            |((t_ms, request, target, model), (status, transport, latency_ms, i, o), (headers, sem, calls))| {
                Record::Attempt(AttemptRec {
                    t_ms,
                    request,
                    target,
                    model: model.map(Into::into),
                    status,
                    transport,
                    latency_ms,
                    input_tokens: i,
                    output_tokens: o,
                    headers,
                    semantic_failure: sem,
                    tool_calls: calls,
                    tool_keys: Vec::new(),
                    answer: None,
                    response_id: None,
                    cut: None,
                    cost_usd: None,
                })
            },
        );
    let outcome = (
        (any::<u64>(), arb_id(), prop::sample::select(Level::ALL.to_vec())),
        (
            prop::collection::vec(text(), 0..3),
            exact_f64(),
            any::<u64>(),
            exact_f64(),
        ),
        prop::collection::vec(name(), 0..3),
    )
        .prop_map(
            |((t_ms, request, level), (chain, quality, tokens, cost_usd), missing)| {
                Record::Outcome(OutcomeRec {
                    t_ms,
                    request,
                    level,
                    chain,
                    quality,
                    tokens,
                    cost_usd,
                    missing,
                    key: None,
                })
            },
        );
    let transition =
        (any::<u64>(), called(), state(), state(), text()).prop_map(|(t_ms, breaker, from, to, reason)| {
            Record::Transition(TransitionRec {
                t_ms,
                breaker,
                from,
                to,
                reason,
            })
        });
    let operator = (
        any::<u64>(),
        prop::sample::select(Command::ACTIONS.to_vec()),
        name(),
        prop::option::of(prop::collection::btree_map(name(), any::<i64>(), 0..3)),
        text(),
    )
        .prop_map(|(t_ms, action, target, args, by)| {
            // set_fault carries its fault; the other actions any arguments.
            let args = match action {
                "set_fault" => {
                    let spec = serde_json::json!({"fault": {"type": "latency", "ms": t_ms % 10_000}, "rate": 1.0});
                    Some(serde_json::Map::from_iter([("fault".to_string(), spec)]))
                }
                _ => args.map(|m| m.into_iter().map(|(k, v)| (k, serde_json::json!(v))).collect()),
            };
            Record::Operator(OperatorRec {
                t_ms,
                action: action.to_string(),
                target,
                args,
                by,
            })
        });
    prop_oneof![header, request, attempt, outcome, transition, operator]
}

/// A structurally valid line to mutate.
fn valid_line() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        HDR.to_string(),
        REQ1.to_string(),
        r#"{"kind":"attempt","t_ms":5,"request":1,"target":"provider:m","status":200,"transport":"reset","latency_ms":3,"input_tokens":1,"output_tokens":1,"headers":{"retry-after":"1"}}"#.to_string(),
        r#"{"kind":"outcome","t_ms":9,"request":1,"level":"failed","chain":["x"],"quality":0,"tokens":0,"cost_usd":0,"missing":[]}"#.to_string(),
        r#"{"kind":"operator","t_ms":9,"action":"drill_on","target":"x","args":{"a":[1]},"by":"me"}"#.to_string(),
        r#"{"kind":"transition","t_ms":9,"breaker":"b","from":"open","to":"half_open","reason":"probe"}"#.to_string(),
    ])
}

/// Random bytes, JSON-ish strings or mutated valid lines.
fn fuzz_line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..40),
        "[{}\\[\\]\":,0-9a-z_ \\-.]{0,40}".prop_map(String::into_bytes),
        (valid_line(), any::<prop::sample::Index>(), any::<u8>(), 0usize..3).prop_map(|(line, at, byte, op)| {
            let mut b = line.into_bytes();
            let i = at.index(b.len());
            match op {
                0 => b[i] = byte,
                1 => b.truncate(i),
                _ => {
                    b.remove(i);
                }
            }
            b
        }),
        valid_line().prop_map(String::into_bytes),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn records_round_trip_through_to_line(rec in arb_record()) {
        let line = rec.to_line();
        prop_assert!(!line.contains('\n'));
        let back: Record = serde_json::from_str(&line).unwrap();
        prop_assert_eq!(&back, &rec);
    }

    #[test]
    fn round_tripped_logs_read_back_through_the_reader(recs in prop::collection::vec(arb_record(), 1..20)) {
        // Make the records a valid log: no header, non-decreasing time, known
        // requests, sizes within the reader's bounds.
        let mut log = Vec::new();
        let mut t = 0u64;
        for (i, mut rec) in recs.into_iter().enumerate() {
            let id = i as u64;
            match &mut rec {
                Record::Header(_) => continue,
                Record::Request(r) => {
                    r.t_ms = t;
                    r.id = if id.is_multiple_of(2) { id.into() } else { LogId::text(format!("r{id}")) };
                    r.prompt_tokens %= fusebox::traffic::log::MAX_TOKENS;
                    r.max_tokens %= fusebox::traffic::log::MAX_TOKENS;
                }
                Record::Attempt(a) => { a.t_ms = t; a.request = LogId::text("seed-3f2b"); a.target = format!("tool:x{}", a.target).parse().unwrap(); }
                Record::Outcome(o) => { o.t_ms = t; o.request = LogId::text("seed-3f2b"); }
                Record::Transition(x) => x.t_ms = t,
                Record::Operator(x) => x.t_ms = t,
            }
            t += i as u64;
            log.push(rec);
        }
        let mut seed = request(0, 0, "seed");
        seed.id = LogId::text("seed-3f2b");
        log.insert(0, Record::Request(seed));
        let text: String = log.iter().map(|r| r.to_line() + "\n").collect();
        let (_f, r) = read_text(&text, false);
        let (reader, back) = r.unwrap();
        // Ids come back as written (string ids numbered for the run).
        let lines = |recs: &[Record]| recs.iter().map(Record::to_line).collect::<Vec<_>>();
        prop_assert_eq!(lines(&back), lines(&log));
        prop_assert_eq!(reader.bad_lines() + reader.unknown_kinds() + reader.torn_lines(), 0);
    }

    #[test]
    fn random_lines_never_panic(lines in prop::collection::vec(fuzz_line(), 0..12), newline_at_end: bool, skip: bool) {
        let mut bytes = lines.join(&b'\n');
        if newline_at_end {
            bytes.push(b'\n');
        }
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&bytes).unwrap();
        f.flush().unwrap();
        let physical = bytes.split(|&b| b == b'\n').count() as u64;
        let mut reader = match LogReader::open(f.path(), skip) {
            Ok(r) => r,
            Err(LogError::Empty { .. }) => return Ok(()),
            Err(e) => return Err(TestCaseError::fail(format!("open: {e}"))),
        };
        let mut records = 0u64;
        let mut steps = 0;
        loop {
            steps += 1;
            prop_assert!(steps <= physical + 2, "reader does not terminate");
            match reader.next_record() {
                Ok(Some(_)) => records += 1,
                Ok(None) => break,
                Err(e) => {
                    prop_assert!(!skip, "skip_bad_lines must not fail on content: {}", e);
                    prop_assert!(matches!(e, LogError::BadLine { .. }), "{}", e);
                    prop_assert!(reader.next_record().unwrap().is_none());
                    break;
                }
            }
        }
        prop_assert!(reader.line_no() <= physical);
        prop_assert!(records + reader.bad_lines() + reader.unknown_kinds() + reader.torn_lines() <= physical);
        prop_assert!(reader.torn_lines() <= 1);
    }
    #[test]
    fn outcome_lines_only_checked_read_as_the_rest_of_the_log(lines in prop::collection::vec(fuzz_line(), 0..12), newline_at_end: bool, skip: bool) {
        let mut bytes = lines.join(&b'\n');
        if newline_at_end {
            bytes.push(b'\n');
        }
        prop_assert_eq!(read_less_outcomes(&bytes, skip, true), read_less_outcomes(&bytes, skip, false));
    }
}

#[test]
fn streams_200_000_requests() {
    const N: u64 = 200_000;
    let mut f = tempfile::NamedTempFile::new().unwrap();
    {
        let mut w = std::io::BufWriter::new(f.as_file_mut());
        writeln!(w, "{HDR}").unwrap();
        for id in 0..N {
            // format!, not to_line: serializing is slow in debug builds and is tested elsewhere.
            let t = id / 4;
            writeln!(
                w,
                r#"{{"kind":"request","t_ms":{t},"id":{id},"user":"u","session":"s-{id}","route":"chat","prompt_tokens":10,"max_tokens":10,"tools":["search"]}}"#
            )
            .unwrap();
        }
        w.flush().unwrap();
    }
    let mut reader = LogReader::open(f.path(), false).unwrap();
    let (mut count, mut last_id, mut last_t) = (0u64, 0u64, 0u64);
    while let Some(rec) = reader.next_record().unwrap() {
        let Record::Request(r) = rec else {
            panic!("not a request: {rec:?}");
        };
        assert_eq!((r.id.n(), r.t_ms, r.tools.len()), (count, count / 4, 1));
        count += 1;
        last_id = r.id.n();
        last_t = r.t_ms;
    }
    assert_eq!((count, last_id, last_t), (N, N - 1, (N - 1) / 4));
    assert_eq!(reader.line_no(), N + 1);
    assert_eq!(reader.bad_lines() + reader.unknown_kinds() + reader.torn_lines(), 0);
}

#[test]
fn replay_answers_as_recorded_by_default_only_when_the_log_has_attempts() {
    use fusebox::traffic::log::has_attempts;
    assert!(has_attempts(&[fixture("no_header.jsonl")], false).unwrap());
    // Two requests and a bad line, no attempt: live providers by default.
    assert!(!has_attempts(&[fixture("not_json.jsonl")], true).unwrap());
    assert!(matches!(
        has_attempts(&[fixture("not_json.jsonl")], false),
        Err(LogError::BadLine { line: 3, .. })
    ));
}
