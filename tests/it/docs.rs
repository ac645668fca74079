//! The docs check: every fenced snippet, command, option and key in
//! README.md and `docs/` is extracted here and run, or read by the code it
//! describes, so the docs cannot drift from what fusebox does. A snippet
//! of a kind this check does not know fails it: teach the check to run it.

use crate::common::Serve;
use fusebox::config::Config;
use fusebox::traffic::load::scenario::Scenario;
use fusebox::traffic::log::LogReader;
use fusebox::tui::keymap::KeyMap;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The documents checked.
const DOCS: [&str; 9] = [
    "README.md",
    "docs/api.md",
    "docs/architecture.md",
    "docs/config.md",
    "docs/limits.md",
    "docs/operator.md",
    "docs/overload.md",
    "docs/performance.md",
    "docs/traffic-log.md",
];

/// The subcommands (`demo` is also what `fusebox` alone runs).
const SUBCOMMANDS: [&str; 13] = [
    "demo",
    "replay",
    "import",
    "serve",
    "attach",
    "check-config",
    "mock",
    "bench",
    "keys new",
    "keys revoke",
    "keys list",
    "keys operator",
    "keys hash",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(file: &str) -> String {
    std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// A fenced snippet: where it is, its language tag and its text.
#[derive(Clone, Debug)]
struct Snippet {
    at: String,
    lang: String,
    text: String,
}

/// What a snippet is, and so how it is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Shell commands, run (see [`shell_commands`]).
    Shell,
    /// The attach walkthrough: a Redis, two gateways, a request, the
    /// console over them; run with its keys typed.
    Walkthrough,
    /// A Python client, run against a gateway.
    Python,
    /// Config TOML, read as a config.
    Config,
    /// Scenario TOML, read as a scenario.
    Scenario,
    /// Traffic log lines, read by the log reader.
    LogLines,
    /// An MCP client's servers (Claude Code's `.mcp.json`, Claude
    /// Desktop's config), each pointed at a gateway's `/mcp`.
    McpClients,
    /// The log reader's error messages, produced.
    LogErrors,
    /// The console, as drawn.
    Screen,
    /// The command-line synopsis: every option is a real one.
    Synopsis,
    /// The runner's pipeline as a diagram: words only, checked by eye.
    Diagram,
}

fn snippets() -> Vec<Snippet> {
    let mut out = Vec::new();
    for file in DOCS {
        let text = read(file);
        let mut open: Option<(usize, String, String)> = None;
        for (i, line) in text.lines().enumerate() {
            match (&mut open, line.strip_prefix("```")) {
                (None, Some(lang)) => open = Some((i + 1, lang.trim().to_string(), String::new())),
                (Some((at, lang, body)), Some(_)) => {
                    out.push(Snippet {
                        at: format!("{file}:{at}"),
                        lang: std::mem::take(lang),
                        text: std::mem::take(body),
                    });
                    open = None;
                }
                (Some((_, _, body)), None) => {
                    body.push_str(line);
                    body.push('\n');
                }
                (None, None) => {}
            }
        }
        assert!(open.is_none(), "{file}: a fenced block is not closed");
    }
    out
}

fn kind(s: &Snippet) -> Option<Kind> {
    let t = s.text.trim_start();
    Some(match s.lang.as_str() {
        "sh" if t.starts_with("redis-server") => Kind::Walkthrough,
        "sh" => Kind::Shell,
        "python" => Kind::Python,
        "toml" if t.starts_with("name = ") => Kind::Scenario,
        "toml" => Kind::Config,
        "json" if t.contains("\"mcpServers\"") => Kind::McpClients,
        "json" => Kind::LogLines,
        "text" if t.contains(".jsonl:") => Kind::LogErrors,
        "" if t.starts_with("fusebox  DEMO") => Kind::Screen,
        "" if t.starts_with("fusebox [demo]") => Kind::Synopsis,
        "" if t.starts_with("session quota →") => Kind::Diagram,
        _ => return None,
    })
}

fn of(k: Kind) -> Vec<Snippet> {
    let found: Vec<Snippet> = snippets().into_iter().filter(|s| kind(s) == Some(k)).collect();
    assert!(!found.is_empty(), "no {k:?} snippet left: remove its check");
    found
}

#[test]
fn every_snippet_is_of_a_kind_this_check_runs() {
    let unknown: Vec<String> = snippets()
        .iter()
        .filter(|s| kind(s).is_none())
        .map(|s| format!("{} ({:?})", s.at, s.lang))
        .collect();
    assert!(
        unknown.is_empty(),
        "snippets no check runs (teach tests/it/docs.rs): {unknown:?}"
    );
}

/// Inline code in the prose (outside fenced snippets; a span may go on
/// over a line break), with the line it starts on.
fn inline_spans(file: &str) -> Vec<(usize, String)> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in read(file).lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        // Fenced lines stay as empty lines, so line numbers hold.
        if !fenced && !line.starts_with("```") {
            prose.push_str(line);
        }
        prose.push('\n');
    }
    let mut out = Vec::new();
    let mut at = 0;
    let parts: Vec<&str> = prose.split('`').collect();
    for (j, p) in parts.iter().enumerate() {
        if j % 2 == 1 && j + 1 < parts.len() {
            out.push((
                prose[..at].matches('\n').count() + 1,
                p.split_whitespace().collect::<Vec<_>>().join(" "),
            ));
        }
        at += p.len() + 1;
    }
    out
}

/// The example programs' options (`--help`).
const EXAMPLES: [&str; 2] = ["gateway_overhead", "mcp_overhead"];

fn example(name: &str) -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_fusebox"));
    bin.parent().unwrap().join("examples").join(name)
}

/// `fusebox SUB --help` for every subcommand, `fusebox --help`, and each
/// example's (as `example:NAME`).
fn helps() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for sub in SUBCOMMANDS.iter().map(|s| Some(*s)).chain([None]) {
        let mut c = Command::new(env!("CARGO_BIN_EXE_fusebox"));
        c.args(sub.iter().flat_map(|s| s.split(' '))).arg("--help");
        let o = c.output().unwrap();
        assert!(o.status.success(), "{sub:?} --help");
        out.push((
            sub.unwrap_or("").to_string(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        ));
    }
    for name in EXAMPLES {
        let o = Command::new(example(name))
            .arg("--help")
            .output()
            .unwrap_or_else(|e| panic!("examples/{name}: {e} (cargo test builds the examples)"));
        assert!(o.status.success(), "{name} --help");
        out.push((
            format!("example:{name}"),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        ));
    }
    out
}

fn has_option(help: &str, flag: &str) -> bool {
    help.split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']')
        .any(|w| w == flag || w.strip_prefix(flag).is_some_and(|rest| rest.starts_with('=')))
}

/// The options of a command line as the docs write it: `fusebox SUB …`,
/// `cargo run --release -- SUB …` (or `--profile dist`), `cargo run
/// --release --example NAME -- …`: (whose options, `--flag`s).
fn options_of(words: &[&str]) -> Option<(String, Vec<String>)> {
    let at = words.iter().position(|w| *w == "fusebox" || *w == "cargo")?;
    let (sub, rest) = match &words[at..] {
        ["fusebox", rest @ ..]
        | ["cargo", "run", "--release", "--", rest @ ..]
        | ["cargo", "run", "--profile", "dist", "--", rest @ ..] => {
            let two = rest.get(..2).map(|w| w.join(" "));
            match (two, rest.first()) {
                (Some(s), _) if SUBCOMMANDS.contains(&s.as_str()) => (s, rest),
                (_, Some(s)) if SUBCOMMANDS.contains(s) => (s.to_string(), rest),
                _ => ("demo".to_string(), rest),
            }
        }
        ["cargo", "run", "--release", "--example", name, "--", rest @ ..]
        | ["cargo", "run", "--profile", "dist", "--example", name, "--", rest @ ..] => {
            (format!("example:{name}"), rest)
        }
        _ => return None,
    };
    let flags = rest
        .iter()
        .map(|w| w.trim_start_matches('['))
        .filter(|w| w.starts_with("--"))
        .map(|w| w.split(['=', ']', '|']).next().unwrap_or(w).to_string())
        .collect();
    Some((sub, flags))
}

/// Every option the docs name is one the command has: in the synopsis, in
/// command lines and in inline code.
#[test]
fn every_option_named_is_a_real_one() {
    let helps = helps();
    let help_of = |sub: &str| &helps.iter().find(|(s, _)| s == sub).unwrap().1;
    let mut bad = Vec::new();
    let checked = std::cell::Cell::new(0);
    let check_line = |at: &str, line: &str, bad: &mut Vec<String>| {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Some((sub, flags)) = options_of(&words) {
            for f in flags {
                checked.set(checked.get() + 1);
                if !has_option(help_of(&sub), &f) {
                    bad.push(format!("{at}: `fusebox {sub}` has no option {f}"));
                }
            }
        }
    };
    // The synopsis: each `fusebox SUB` line and its continuation lines.
    for s in of(Kind::Synopsis) {
        let mut current = String::new();
        for line in s.text.lines() {
            if line.starts_with("fusebox") && !current.is_empty() {
                check_line(&s.at, &current, &mut bad);
                current.clear();
            }
            current.push_str(line);
            current.push(' ');
        }
        check_line(&s.at, &current, &mut bad);
    }
    for file in DOCS {
        for (line, span) in inline_spans(file) {
            let at = format!("{file}:{line}");
            if span.starts_with("fusebox ") || span.starts_with("cargo ") {
                check_line(&at, &span, &mut bad);
            } else if let Some(flag) = span.strip_prefix("--").map(|f| format!("--{f}")) {
                let flag = flag.split([' ', '=', '|']).next().unwrap().to_string();
                // cargo's own (`--` passes on what follows), and valgrind's.
                const NOT_OURS: [&str; 6] = [
                    "--",
                    "--release",
                    "--profile",
                    "--example",
                    "--all-targets",
                    "--cache-sim",
                ];
                if NOT_OURS.contains(&flag.as_str()) {
                    continue;
                }
                checked.set(checked.get() + 1);
                if !helps.iter().any(|(_, h)| has_option(h, &flag)) {
                    bad.push(format!("{at}: no command has the option {flag}"));
                }
            }
        }
    }
    assert!(checked.get() > 60, "only {} options found", checked.get());
    assert!(bad.is_empty(), "{bad:#?}");
}

/// The keys of the README's table and of the runbook's are the keymap's
/// defaults, with the action names the keymap uses.
#[test]
fn the_documented_keys_are_the_keymap_s() {
    let map = KeyMap::defaults();
    let defaults: BTreeSet<(String, String)> = map
        .help_rows()
        .into_iter()
        .flat_map(|(_, action)| {
            map.keys_for(action)
                .iter()
                .map(move |k| (k.clone(), action.name().to_string()))
                .collect::<Vec<_>>()
        })
        .collect();
    let keys: BTreeSet<String> = defaults.iter().map(|(k, _)| k.clone()).collect();
    // The runbook: `| keys | action names | what |`.
    let runbook = read("docs/operator.md");
    let mut documented = BTreeSet::new();
    for row in runbook.lines().skip_while(|l| !l.starts_with("| key")).skip(2) {
        if !row.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let ticks = |c: &str| -> Vec<String> { c.split('`').skip(1).step_by(2).map(str::to_string).collect() };
        let (ks, actions) = (ticks(cells[1]), ticks(cells[2]));
        for k in &ks {
            assert!(keys.contains(k), "docs/operator.md: `{k}` is not a default key");
            let action = map.action(&KeyMap::key_event(k).unwrap()).unwrap();
            assert!(
                actions.iter().any(|a| a == action.name()),
                "docs/operator.md: `{k}` is `{}`, not one of {actions:?}",
                action.name()
            );
            documented.insert(k.clone());
        }
    }
    assert_eq!(documented, keys, "docs/operator.md lists every default key");
    // The README's table names keys as people say them.
    let readme = read("README.md");
    let mut said = BTreeSet::new();
    for row in readme
        .lines()
        .skip_while(|l| !l.starts_with("| key | action |"))
        .skip(2)
    {
        if !row.starts_with('|') {
            break;
        }
        let cell = row.split('|').nth(1).unwrap();
        // `x` is a key as typed; between them, keys by their names; `1`–`5` a range.
        let parts: Vec<&str> = cell.split('`').collect();
        for (i, part) in parts.iter().enumerate() {
            if i % 2 == 1 {
                said.insert(part.to_string());
                if parts.get(i + 1) == Some(&"–") {
                    let (from, to) = (part.parse::<u32>().unwrap(), parts[i + 2].parse::<u32>().unwrap());
                    said.extend((from..to).map(|n| n.to_string()));
                }
                continue;
            }
            for word in part.split([',', '/', ' ']).filter(|w| !w.is_empty() && *w != "–") {
                let named: &[&str] = match word {
                    "F1" => &["f1"],
                    "Ctrl-C" => &["ctrl-c"],
                    "Tab" => &["tab"],
                    "Shift-Tab" => &["backtab"],
                    "arrows" => &["up", "down"],
                    "PgUp" => &["pageup"],
                    "PgDn" => &["pagedown"],
                    "space" => &["space"],
                    "Enter" => &["enter"],
                    other => panic!("README.md key table: no key is called `{other}`"),
                };
                said.extend(named.iter().map(|s| s.to_string()));
            }
        }
    }
    assert_eq!(said, keys, "README's key table lists every default key");
}

#[test]
fn config_snippets_are_valid_configs() {
    for s in of(Kind::Config) {
        Config::parse(&s.text, &s.at).unwrap_or_else(|e| panic!("{}: {e}", s.at));
    }
    for s in of(Kind::Scenario) {
        Scenario::parse(&s.text, &s.at).unwrap_or_else(|e| panic!("{}: {e}", s.at));
    }
}

/// The format's examples, one after another, are a log the reader reads.
#[test]
fn the_traffic_log_examples_read_as_a_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("examples.jsonl");
    let text: String = of(Kind::LogLines).iter().map(|s| s.text.as_str()).collect();
    std::fs::write(&log, &text).unwrap();
    let reader = LogReader::open(&log, false).unwrap();
    let mut read = 0;
    for r in reader {
        r.unwrap_or_else(|e| panic!("docs/traffic-log.md: {e}"));
        read += 1;
    }
    assert_eq!(read, text.lines().count() - 1, "every line but the header is a record");
}

/// Each error message the format documents is what the reader says of a
/// line with that mistake.
#[test]
fn the_traffic_log_errors_are_the_reader_s() {
    let header = r#"{"kind":"header","v":1,"started_at":"2025-11-29T14:00:00.000Z","seed":42}"#;
    let request = |t: u64, id: u64| {
        format!(
            r#"{{"kind":"request","t_ms":{t},"id":{id},"user":"u","session":"s","route":"default","prompt_tokens":1,"max_tokens":1,"tools":[]}}"#
        )
    };
    let attempt = |extra: &str| {
        format!(
            r#"{{"kind":"attempt","t_ms":1500,"request":1,"target":"provider:openai","status":200,"latency_ms":1,"input_tokens":1,"output_tokens":1{extra}}}"#
        )
    };
    let dir = tempfile::tempdir().unwrap();
    for s in of(Kind::LogErrors) {
        for want in s.text.lines() {
            let line_no: usize = want.split(':').nth(1).unwrap().parse().unwrap();
            let bad = if want.contains("goes backwards") {
                request(1200, 99)
            } else if want.contains("`latency_ms`") {
                attempt("").replace(r#""latency_ms":1"#, r#""latency_ms":"fast""#)
            } else if want.contains("unknown request 99") {
                attempt("").replace(r#""request":1"#, r#""request":99"#)
            } else if want.contains("unknown action") {
                r#"{"kind":"operator","t_ms":1500,"action":"explode","target":"provider:openai","by":"x"}"#.to_string()
            } else if want.contains("`transport`") {
                attempt(r#","transport":"slow""#)
            } else if want.contains("not JSON") {
                "nope".to_string()
            } else {
                panic!("{}: no line makes `{want}`: teach tests/it/docs.rs", s.at)
            };
            let mut lines = vec![header.to_string()];
            while lines.len() + 1 < line_no {
                lines.push(request(1500, lines.len() as u64));
            }
            lines.push(bad);
            let log = dir.path().join("incident.jsonl");
            std::fs::write(&log, lines.join("\n") + "\n").unwrap();
            let mut reader = LogReader::open(&log, false).unwrap();
            let err = loop {
                match reader.next() {
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => break e.to_string(),
                    None => panic!("{}: `{want}` was not said", s.at),
                }
            };
            let said = err.rsplit('/').next().unwrap();
            let want = want.trim_end_matches(", …");
            assert!(
                said.starts_with(want.trim_end_matches('…')),
                "{}: documented `{want}`, said `{said}`",
                s.at
            );
        }
    }
}

/// A console line's shape: its labels, with each value (anything with a
/// digit, a gauge, the scenario's name) as `#`.
fn shape(line: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in line.trim_start_matches(['┏', '┃', '▶', ' ']).split_whitespace() {
        let value = w.chars().any(|c| c.is_ascii_digit())
            || w.chars().all(|c| "░▒▓█▏▎▍▌▋▊▉".contains(c))
            || out.last().is_some_and(|l| l == "scenario");
        out.push(if value { "#".into() } else { w.to_string() });
    }
    out
}

/// The console the README shows is the console drawn: its header, budget
/// line and column heads.
#[tokio::test(start_paused = true)]
async fn the_console_shown_is_the_console_drawn() {
    let (_, mut app) = crate::console::incident(false).await;
    app.opts.source = fusebox::tui::app::source("scenario tour", "http");
    let drawn = crate::console::text(&crate::console::render(&app, 140, 45));
    for s in of(Kind::Screen) {
        for starts in ["fusebox", "global", "breaker"] {
            // A line from `starts` on (the badges that may come first apart).
            let from = |l: Vec<String>| l.iter().position(|w| w == starts).map(|i| l[i..].to_vec());
            let shown = s
                .text
                .lines()
                .map(shape)
                .find_map(from)
                .unwrap_or_else(|| panic!("{}: no `{starts}` line", s.at));
            let row = drawn
                .lines()
                .map(shape)
                .find_map(from)
                .unwrap_or_else(|| panic!("no `{starts}` line drawn:\n{drawn}"));
            // What the state adds (a frozen refill, say) may follow.
            assert!(
                row.starts_with(&shown),
                "{}: the `{starts}` line is not as drawn: {shown:?} against {row:?}",
                s.at
            );
        }
    }
}

/// Commands of a shell snippet: continuation lines joined, with the
/// output documented after it (`# {…}` or `# STATUS {…}`).
fn shell_commands(s: &Snippet) -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    let mut current = String::new();
    for line in s.text.lines() {
        let t = line.trim();
        if let Some(c) = t.strip_prefix("# ") {
            let doc = c.trim_start_matches(|ch: char| ch.is_ascii_digit()).trim_start();
            if doc.starts_with('{') {
                if let Some(last) = out.last_mut() {
                    last.1 = Some(c.to_string());
                }
            }
            continue;
        }
        if t.is_empty() {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(t);
                // A trailing `# comment` after the command.
                let cmd = match current.find("  #") {
                    Some(i) => current[..i].trim_end().to_string(),
                    None => current.clone(),
                };
                out.push((cmd, None));
                current.clear();
            }
        }
    }
    out
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Every curl recipe against a gateway (its port for 8787): it succeeds,
/// and says what the docs say it says.
#[test]
fn the_curl_recipes_answer_as_documented() {
    assert!(
        have("curl"),
        "curl is needed to run the docs' recipes (.ci/run installs it)"
    );
    let serve = Serve::start();
    let mut ran = 0;
    for s in of(Kind::Shell) {
        for (cmd, said) in shell_commands(&s) {
            if !cmd.starts_with("curl ") {
                continue;
            }
            let cmd = cmd.replace("http://127.0.0.1:8787", &serve.base);
            let o = Command::new("sh")
                .args(["-c", &format!("{cmd} -w '\\n%{{http_code}}'")])
                .env("FUSEBOX_TOKEN", "docs-check")
                .output()
                .unwrap();
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            assert!(o.status.success(), "{}: `{cmd}` failed: {out}", s.at);
            let (body, status) = out.rsplit_once('\n').unwrap();
            let body: serde_json::Value =
                serde_json::from_str(body).unwrap_or_else(|e| panic!("{}: `{cmd}` said no JSON ({e}): {out}", s.at));
            match said {
                Some(said) => {
                    let (want_status, want) = match said.split_once(' ') {
                        Some((code, rest)) if code.chars().all(|c| c.is_ascii_digit()) => (code.to_string(), rest),
                        _ => ("200".to_string(), said.as_str()),
                    };
                    let want: serde_json::Value = serde_json::from_str(want).unwrap();
                    assert_eq!((status, &body), (want_status.as_str(), &want), "{}: `{cmd}`", s.at);
                }
                None => assert_eq!(status, "200", "{}: `{cmd}`: {body}", s.at),
            }
            ran += 1;
        }
    }
    assert!(ran >= 6, "{ran} curl recipes");
}

/// The grid behind overload.md's "Where each one acts" prints a row for
/// every built-in scenario under each mechanism.
#[test]
fn the_do_no_harm_grid_runs() {
    let o = Command::new(example("do_no_harm")).args(["1", "1"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    let scenarios = fusebox::traffic::load::scenario::Scenario::built_in_names();
    let mechanisms: Vec<&str> = out.lines().filter(|l| l.contains("seeds 1–1, 1 min")).collect();
    assert_eq!(mechanisms.len(), 4, "{out}");
    for name in scenarios {
        let rows = out.lines().filter(|l| l.starts_with(&format!("| {name} ("))).count();
        assert_eq!(rows, 4, "{name}: {out}");
    }
}

/// The config example program writes a config `check-config` accepts.
#[test]
fn the_default_config_example_checks() {
    let s = of(Kind::Shell)
        .into_iter()
        .find(|s| s.text.contains("--example print_default_config"))
        .unwrap();
    let (cmd, _) = shell_commands(&s).remove(0);
    assert_eq!(cmd, "cargo run --example print_default_config > fusebox.toml");
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_fusebox"));
    let example = example("print_default_config");
    let o = Command::new(&example)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (cargo test builds the examples)", example.display()));
    assert!(o.status.success());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fusebox.toml");
    std::fs::write(&file, &o.stdout).unwrap();
    let c = Command::new(&bin).arg("check-config").arg(&file).output().unwrap();
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
}

/// A gateway in front of the stdio orders server (`cargo test` builds the
/// example), as the README's MCP clients expect one.
fn serve_with_mcp() -> Serve {
    let orders = crate::common::mcp::stdio_orders();
    let cfg = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("docs-mcp.toml");
    std::fs::write(
        &cfg,
        format!("[mcp.orders]\ncommand = [{:?}]\n", orders.display().to_string()),
    )
    .unwrap();
    Serve::start_with(&["--config", cfg.to_str().unwrap()])
}

/// Every MCP client config of the README names a gateway's `/mcp`, and an
/// MCP session opens there (Claude's own clients are not on this machine).
#[test]
fn the_mcp_client_configs_reach_the_gateway_s_mcp() {
    let serve = serve_with_mcp();
    for s in of(Kind::McpClients) {
        let v: serde_json::Value = serde_json::from_str(&s.text).unwrap_or_else(|e| panic!("{}: {e}", s.at));
        let servers = v["mcpServers"]
            .as_object()
            .unwrap_or_else(|| panic!("{}: no mcpServers", s.at));
        for (name, server) in servers {
            let url = server["url"]
                .as_str()
                .or_else(|| {
                    server["args"]
                        .as_array()?
                        .iter()
                        .filter_map(|a| a.as_str())
                        .find(|a| a.starts_with("http"))
                })
                .unwrap_or_else(|| panic!("{}: {name} names no URL", s.at));
            assert_eq!(url, "http://127.0.0.1:8787/mcp", "{}: {name}", s.at);
            let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": name, "version": "1"}}});
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let status = rt.block_on(async {
                let url = url.replace("http://127.0.0.1:8787", &serve.base);
                let r = reqwest::Client::new()
                    .post(url)
                    .header("accept", "application/json, text/event-stream");
                r.json(&init).send().await.map(|r| r.status().as_u16())
            });
            assert_eq!(status.ok(), Some(200), "{}: {name}", s.at);
        }
    }
}

/// Every Python client of the README against a gateway (its port for
/// 8787), with the SDKs installed (`FUSEBOX_SDK_PYTHON`, as `tests/sdk/`).
#[test]
fn the_python_recipes_run_against_the_gateway() {
    let Some(python) = crate::sdk::python() else { return };
    let serve = serve_with_mcp();
    for s in of(Kind::Python) {
        let code = s.text.replace("http://127.0.0.1:8787", &serve.base);
        let o = Command::new(&python).args(["-c", &code]).output().unwrap();
        let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success(), "{}: {err}", s.at);
        assert!(!out.trim().is_empty(), "{}: printed nothing", s.at);
    }
}

/// A console run in a terminal (`script` gives it a pty) until `until` is
/// drawn; then `q`. What it drew.
fn console(args: &[&str], until: &str) -> String {
    console_typed(args, &[(until, "q")], &mut |_, _| {})
}

/// A console run in a terminal (`script` gives it a pty): each step's keys
/// are typed once its text is drawn (after the previous step's keys) and
/// `between` has looked at the step (its index, what was drawn since the
/// previous one); the last step's keys must quit it. What it drew.
fn console_typed(args: &[&str], steps: &[(&str, &str)], between: &mut dyn FnMut(usize, &str)) -> String {
    let dir = tempfile::tempdir().unwrap();
    let typescript = dir.path().join("typescript");
    let cmd = format!(
        "stty rows 45 cols 140; exec {} {} --log-dir {}",
        env!("CARGO_BIN_EXE_fusebox"),
        args.join(" "),
        dir.path().display()
    );
    let mut script = crate::common::in_a_terminal(&cmd, &typescript);
    let shown = || String::from_utf8_lossy(&std::fs::read(&typescript).unwrap_or_default()).into_owned();
    let mut seen = 0;
    for (i, (until, keys)) in steps.iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !shown().get(seen..).is_some_and(|s| s.contains(until)) {
            assert!(
                Instant::now() < deadline,
                "`fusebox {}` drew no {until}: {}",
                args.join(" "),
                shown().get(seen..).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let now = shown();
        between(i, &now[seen..]);
        seen = now.len();
        use std::io::Write;
        script.stdin.as_mut().unwrap().write_all(keys.as_bytes()).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = script.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "`q` did not quit `fusebox {}`",
            args.join(" ")
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "`fusebox {}` exited {status}", args.join(" "));
    shown()
}

/// A child process, killed on drop.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `target`'s breaker state on the gateway at `base`.
fn breaker_state(base: &str, target: &str) -> String {
    let o = Command::new("curl")
        .args(["-s", &format!("{base}/_fusebox/snapshot")])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    v["breakers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|b| b["target"] == target)
        .map(|b| b["breaker"]["state"].as_str().unwrap_or("").to_string())
        .unwrap_or_default()
}

/// The attach walkthrough as written: its Redis (one of the tests', on a
/// free port), its two gateways (on free ports), its request, and the
/// console over them, where the keys it gives trip `provider:openai` on
/// both gateways and reset it.
#[test]
fn the_attach_walkthrough_runs() {
    let Some(redis) = crate::common::redis::Redis::start() else {
        return;
    };
    let s = of(Kind::Walkthrough).remove(0);
    let ports = [free_port(), free_port()];
    let fill = |c: &str| {
        c.replace("redis://127.0.0.1:6379/0", &redis.url())
            .replace("127.0.0.1:8801", &format!("127.0.0.1:{}", ports[0]))
            .replace("127.0.0.1:8802", &format!("127.0.0.1:{}", ports[1]))
    };
    let bases = ports.map(|p| format!("http://127.0.0.1:{p}"));
    let mut gateways = Vec::new();
    let mut attached = false;
    for (i, (cmd, _)) in shell_commands(&s).into_iter().enumerate() {
        let cmd = fill(&cmd);
        if cmd.starts_with("redis-server") {
            assert_eq!(i, 0, "{}: Redis comes first", s.at);
            continue;
        }
        if cmd.starts_with("curl ") {
            let o = Command::new("sh")
                .args(["-c", &format!("{cmd} -o /dev/null -w '%{{http_code}}'")])
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&o.stdout), "200", "{}: `{cmd}`", s.at);
            continue;
        }
        let args = cmd
            .strip_prefix("cargo run --release -- ")
            .unwrap_or_else(|| panic!("{}: no check runs `{cmd}`: teach tests/it/docs.rs", s.at));
        match args.strip_suffix(" &") {
            Some(serve) => {
                assert!(serve.starts_with("serve --headless"), "{}: `{cmd}`", s.at);
                let child = Command::new(env!("CARGO_BIN_EXE_fusebox"))
                    .args(serve.split_whitespace())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                gateways.push(Killed(child));
                let base = &bases[gateways.len() - 1];
                crate::common::redis::wait_until("the gateway answers", || {
                    Command::new("curl")
                        .args(["-sf", &format!("{base}/healthz")])
                        .output()
                        .is_ok_and(|o| o.status.success())
                });
            }
            None => {
                assert!(args.starts_with("attach"), "{}: `{cmd}`", s.at);
                let live = ports.map(|p| format!("127.0.0.1:{p} live"));
                // Every gateway's provider:openai breaker comes to `state`.
                let all = |state: &str| {
                    crate::common::redis::wait_until(state, || {
                        bases.iter().all(|b| breaker_state(b, "provider:openai") == state)
                    });
                };
                console_typed(
                    &args.split_whitespace().collect::<Vec<_>>(),
                    &[
                        (&live[0], "/provider:openai\r"),
                        ("filter", "o"),
                        ("Force OPEN provider:openai?", "y"),
                        ("applied on", "r"),
                        ("applied on", "q"),
                    ],
                    &mut |step, drawn| match step {
                        0 => assert!(drawn.contains(&live[1]), "both instances live: {drawn}"),
                        3 => all("forced_open"),
                        4 => all("closed"),
                        _ => {}
                    },
                );
                attached = true;
            }
        }
    }
    assert!(attached && gateways.len() == 2, "{}: two gateways and an attach", s.at);
}

/// The quick start: `cargo run --release` is the console over the demo
/// (`q` leaves it), `cargo test` is what CI runs, and `cargo run --release
/// -- serve` is the console over a gateway on 127.0.0.1:8787.
#[test]
fn the_quick_start_and_serve_commands_run() {
    let mut ran = BTreeSet::new();
    for s in of(Kind::Shell) {
        for (cmd, _) in shell_commands(&s) {
            match cmd.as_str() {
                "cargo run --release" => {
                    let shown = console(&[], "Breakers");
                    assert!(shown.contains("DEMO"), "{}", s.at);
                }
                "cargo test" => assert!(
                    read(".ci/run").lines().any(|l| l == "cargo test"),
                    ".ci/run runs `cargo test`"
                ),
                "cargo run --release -- serve" => {
                    let probe = std::thread::spawn(|| {
                        let deadline = Instant::now() + Duration::from_secs(60);
                        loop {
                            if let Ok(mut c) = std::net::TcpStream::connect("127.0.0.1:8787") {
                                use std::io::{Read, Write};
                                c.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").unwrap();
                                let mut answer = String::new();
                                let _ = c.read_to_string(&mut answer);
                                return answer;
                            }
                            assert!(Instant::now() < deadline, "nothing listens on 127.0.0.1:8787");
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    });
                    // `q` is typed only once the probe has its answer, so the
                    // gateway is still up when the probe connects.
                    let (mut probe, mut answer) = (Some(probe), String::new());
                    let shown = console_typed(&["serve"], &[("127.0.0.1:8787", "q")], &mut |_, _| {
                        if let Some(p) = probe.take() {
                            answer = p.join().unwrap();
                        }
                    });
                    assert!(shown.contains("SERVE"), "{}", s.at);
                    assert!(
                        answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"),
                        "{answer}"
                    );
                }
                c if c.starts_with("curl ") || c.starts_with("cargo run --example") => continue,
                // The deploy commands: the image test runs the build script,
                // the manifests test renders what `apply -k` applies.
                c if c.starts_with("cargo build --profile dist && docs/deploy/image ") => {
                    assert!(root().join("docs/deploy/image").is_file(), "{}", s.at);
                    continue;
                }
                "kubectl create secret generic fusebox-provider-keys --from-file=openai=./openai.key" => {
                    assert!(
                        read("docs/deploy/kubernetes/deployment.yaml").contains("secretName: fusebox-provider-keys")
                    );
                    assert!(read("docs/deploy/kubernetes/fusebox.toml").contains("/run/secrets/fusebox/openai"));
                    continue;
                }
                "kubectl apply -k docs/deploy/kubernetes" => continue,
                other => panic!("{}: no check runs `{other}`: teach tests/it/docs.rs", s.at),
            }
            ran.insert(cmd);
        }
    }
    assert_eq!(ran.len(), 3, "{ran:?}");
}

/// How each command the prose names (inline) is checked: run here with
/// its placeholders filled in, or why not here.
enum Check {
    /// Run, its placeholders (`LOG`, `FILE.1`, `CONFIG_A`, …) filled in;
    /// it must succeed.
    Run,
    /// Not run here, for this reason (its options are still checked).
    Elsewhere(&'static str),
}

fn check_of(cmd: &str) -> Option<Check> {
    use Check::*;
    Some(match cmd {
        "cargo run --release -- demo --headless"
        | "fusebox replay LOG --headless --summary-json out.json"
        | "fusebox replay LOG --compare CONFIG_A CONFIG_B"
        | "fusebox replay FILE.1 FILE.2 FILE"
        | "fusebox mock --listen 127.0.0.1:8790"
        | "fusebox check-config FILE"
        | "fusebox keys new alice-app --user alice --route default"
        | "fusebox keys operator ana --scope operate"
        | "fusebox demo --headless --scenario runaway-agent --seed 7 --duration 25m --config examples/spend-rate.toml"
        | "fusebox demo --headless --scenario runaway-agent --seed 7 --duration 25m"
        | "fusebox demo --headless --scenario capacity-drop --seed 7 --config examples/adaptive.toml"
        | "fusebox demo --headless --scenario capacity-drop --seed 7"
        | "fusebox demo --headless --scenario fair-shares --seed 7 --config examples/fair-shares.toml"
        | "fusebox demo --headless --scenario heavy-tail --seed 7 --config examples/hedging.toml" => Run,
        "fusebox keys hash" => Elsewhere("reads a secret on standard input (the keys test pipes one in)"),
        "fusebox keys new" => Elsewhere("needs a name and a user: run with both just below it in docs/api.md"),
        "fusebox keys operator" => Elsewhere("needs a name and a scope: run with both in docs/api.md"),
        "fusebox serve" | "fusebox serve --readonly" | "fusebox demo" | "fusebox replay LOG" => {
            Elsewhere("the command itself, run by the quick-start, curl and console checks")
        }
        "cargo test" => Elsewhere("what CI runs (the quick-start check)"),
        "fusebox demo --headless --scenario NAME --seed N --config examples/adaptive.toml --record FILE" => {
            Elsewhere("the adaptive do-no-harm table's runs: tests/it/adaptive.rs runs them at seeds 1-30")
        }
        "cargo test --test it adaptive:: -- --nocapture" => {
            Elsewhere("the adaptive tests themselves, which print every seed's figures")
        }
        "fusebox attach" | "fusebox attach URL…" => {
            Elsewhere("the console over running gateways, run by the attach walkthrough check")
        }
        "fusebox demo --config fusebox.toml" => Elsewhere("calls the paid providers of the config the README writes"),
        "fusebox demo --headless --scenario heavy-tail --seed N --config examples/hedging.toml --record on.jsonl" => {
            Elsewhere("a measurement over ten seeds, its recordings summed by hand: the hedge tests record and replay the same run")
        }
        "fusebox demo --headless --scenario retry-storm --speed 1 --duration 7m --state redis://127.0.0.1:6379/0 --config examples/fleet-retries.toml" => {
            Elsewhere("7 minutes on a Redis: the fleet test runs 20 s of the same brownout on four instances")
        }
        "cargo run --profile dist -- bench" | "cargo run --profile dist -- bench --overload-control" => {
            Elsewhere("4,000,000 decisions on every core: a measurement, run by hand (the cli test runs a short one)")
        }
        "cargo run --profile dist -- bench --state redis://127.0.0.1:6379/0" => {
            Elsewhere("a measurement against Redis, run by hand (the fleet tests run the store)")
        }
        "fusebox serve --otlp-endpoint http://127.0.0.1:4318" => {
            Elsewhere("needs a collector: the otel tests run it against a loopback receiver")
        }
        "fusebox import --format otlp FILE -o LOG" | "fusebox replay --format otlp FILE" => {
            Elsewhere("needs OTLP/JSON traces: the otel import test runs both on a demo's")
        }
        "cargo run --release --example otlp_sink" => Elsewhere("a receiver that runs until stopped"),
        "cargo run --release" => Elsewhere("the quick start's console, run by the quick start check"),
        "cargo run --profile dist -- bench --otlp-endpoint http://127.0.0.1:4318" => {
            Elsewhere("a measurement, run by hand against otlp_sink")
        }
        c if c.starts_with("cargo bench") => Elsewhere("criterion benchmarks, run by hand"),
        "cargo build --timings" | "cargo build --profile dist" | "cargo build --release" => {
            Elsewhere("cold builds of minutes, timed by hand")
        }
        "cargo run --release --example do_no_harm -- 5 10" => {
            Elsewhere("minutes of runs, by hand: the_do_no_harm_grid_runs runs it at one seed for a minute")
        }
        c if c.starts_with("cargo build --profile dist && cargo run --profile dist --example gateway_overhead")
            || c.starts_with(
                "cargo build --profile dist --examples --bins && cargo run --profile dist --example mcp_overhead",
            )
            || c.starts_with("cargo run --profile dist --example gateway_log")
            || c.starts_with("fusebox replay gw1m.jsonl") =>
        {
            Elsewhere("benchmarks of minutes, run by hand")
        }
        _ => return None,
    })
}

/// Every command the prose names is run here, or says why not.
#[test]
fn the_commands_in_the_prose_run() {
    let bin = env!("CARGO_BIN_EXE_fusebox");
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    // What the placeholders stand for: a recorded log (also rotated into
    // segments), and configs.
    let fusebox = |args: &[&str]| {
        let o = Command::new(bin).args(args).output().unwrap();
        assert!(
            o.status.success(),
            "fusebox {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        o
    };
    fusebox(&["demo", "--headless", "--duration", "2m", "--record", &path("LOG")]);
    fusebox(&[
        "demo",
        "--headless",
        "--duration",
        "6m",
        "--record",
        &path("FILE"),
        "--rotate-mb",
        "1",
    ]);
    assert!(
        dir.path().join("FILE.2").exists() && !dir.path().join("FILE.3").exists(),
        "six minutes of the tour fill two 1 MB segments and part of a third"
    );
    let config = Command::new(example("print_default_config")).output().unwrap().stdout;
    for name in ["CONFIG_A", "CONFIG_B", "FILE.toml"] {
        std::fs::write(dir.path().join(name), &config).unwrap();
    }
    let mut unchecked = Vec::new();
    for file in DOCS {
        for (line, span) in inline_spans(file) {
            if !(span.starts_with("fusebox ") || span.starts_with("cargo ")) {
                continue;
            }
            match check_of(&span) {
                None => unchecked.push(format!("{file}:{line}: `{span}`")),
                Some(Check::Elsewhere(why)) => eprintln!("{file}:{line}: `{span}` is not run here: {why}"),
                Some(Check::Run) => {
                    let words: Vec<String> = span
                        .split_whitespace()
                        .skip_while(|w| *w != "fusebox" && *w != "--")
                        .skip(1)
                        .map(|w| match w {
                            "LOG" | "FILE.1" | "FILE.2" | "FILE" | "CONFIG_A" | "CONFIG_B" => path(w),
                            "out.json" => path("out.json"),
                            w => w.to_string(),
                        })
                        // check-config's FILE is a config.
                        .map(
                            |w| match span.starts_with("fusebox check-config") && w == path("FILE") {
                                true => path("FILE.toml"),
                                false => w,
                            },
                        )
                        .collect();
                    if !words.iter().any(|w| w == "--headless" || w == "--compare") && words[0] == "replay" {
                        // The console over the replay: it draws, and `q` leaves.
                        let words: Vec<&str> = words.iter().map(String::as_str).collect();
                        console(&words, "REPLAY");
                        continue;
                    }
                    let mut child = Command::new(bin)
                        .args(&words)
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap();
                    if words[0] == "mock" {
                        // A server: it answers, then is stopped.
                        let deadline = Instant::now() + Duration::from_secs(30);
                        while std::net::TcpStream::connect("127.0.0.1:8790").is_err() {
                            assert!(Instant::now() < deadline, "{file}:{line}: `{span}` does not listen");
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        let _ = child.kill();
                        let _ = child.wait();
                        continue;
                    }
                    let o = child.wait_with_output().unwrap();
                    assert!(
                        o.status.success(),
                        "{file}:{line}: `{span}` ({words:?}): {}",
                        String::from_utf8_lossy(&o.stderr)
                    );
                }
            }
        }
    }
    assert!(
        unchecked.is_empty(),
        "commands no check runs (teach tests/it/docs.rs): {unchecked:#?}"
    );
    let summary: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path("out.json")).unwrap()).unwrap();
    assert_eq!(summary["v"], 1, "{summary}");
}
