//! The layering docs/architecture.md states holds in the code: each
//! top-level module of `src/` uses only those listed below it in the
//! layout table (or on its own row), so there is no import cycle and
//! dependencies point one way.

use std::collections::BTreeMap;
use std::path::Path;

/// Each module's row in the layout table, top first.
fn ranks() -> BTreeMap<String, usize> {
    let doc = std::fs::read_to_string("docs/architecture.md").expect("docs/architecture.md");
    let mut ranks = BTreeMap::new();
    let rows = doc.lines().skip_while(|l| !l.starts_with("| folder or file")).skip(2);
    for (rank, row) in rows.take_while(|l| l.starts_with("| `")).enumerate() {
        let first = row.split('|').nth(1).unwrap_or_default();
        for name in first.split('`').skip(1).step_by(2) {
            let module = name.trim_end_matches('/').trim_end_matches(".rs");
            ranks.insert(module.to_string(), rank);
        }
    }
    ranks
}

/// The top-level modules `text` names through `crate::`, outside its tests.
fn uses(text: &str) -> Vec<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    let mut found = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or_default();
            found.extend(
                inner
                    .split(',')
                    .filter_map(|p| p.trim().split("::").next())
                    .map(str::to_string),
            );
        } else {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            found.push(name);
        }
    }
    found.retain(|n| !n.is_empty());
    found
}

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("a source folder").flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_module_uses_only_those_below_it() {
    let ranks = ranks();
    let mut wrong = Vec::new();
    let mut unlisted = Vec::new();
    let modules: Vec<_> = std::fs::read_dir("src")
        .expect("src")
        .flatten()
        .map(|e| e.path())
        .map(|p| {
            (
                p.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string(),
                p,
            )
        })
        .filter(|(name, _)| name != "main" && name != "lib")
        .collect();
    for (name, path) in &modules {
        let name = name.clone();
        let Some(&rank) = ranks.get(&name) else {
            unlisted.push(name);
            continue;
        };
        let mut sources = Vec::new();
        if path.is_dir() {
            files(path, &mut sources);
        } else {
            sources.push(path.clone());
        }
        for file in sources {
            let text = std::fs::read_to_string(&file).expect("a source file");
            // Functions of the crate's root (`crate::log_dir`) are no module.
            let used = uses(&text).into_iter().filter(|u| modules.iter().any(|(m, _)| m == u));
            for used in used {
                match ranks.get(&used) {
                    Some(&r) if r < rank => wrong.push(format!("{} uses {used}, which is above it", file.display())),
                    Some(_) => {}
                    None => unlisted.push(used),
                }
            }
        }
    }
    unlisted.sort();
    unlisted.dedup();
    assert!(
        unlisted.is_empty(),
        "not in docs/architecture.md's layout: {unlisted:?}"
    );
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_use_finder_reads_paths_and_groups() {
    let text = "use crate::runner::Runner;\nuse crate::{clock::Clock, target};\nfn f() { crate::wire::x() }\n#[cfg(test)]\nuse crate::cli;";
    assert_eq!(uses(text), ["runner", "clock", "target", "wire"]);
}

/// Every public type has a name of its own in `src/`, so a name read in
/// any file says which type it is without its path.
#[test]
fn no_two_public_types_share_a_name() {
    let mut all = Vec::new();
    files(Path::new("src"), &mut all);
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for path in &all {
        let text = std::fs::read_to_string(path).unwrap();
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if let ["pub", "struct" | "enum" | "type" | "trait", name, ..] = words.as_slice() {
                let name: String = name.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                seen.entry(name).or_default().push(path.display().to_string());
            }
        }
    }
    let shared: Vec<_> = seen.iter().filter(|(_, at)| at.len() > 1).collect();
    assert!(seen.len() > 100, "public types found: {}", seen.len());
    assert!(shared.is_empty(), "public types sharing a name: {shared:?}");
}

/// The console's state and commands never call its view: only the loop
/// in `tui/mod.rs` draws, and `tui/ui/` reads the state.
#[test]
fn the_console_state_never_calls_its_view() {
    let mut all = Vec::new();
    files(Path::new("src/tui"), &mut all);
    let state: Vec<_> = all
        .iter()
        .filter(|p| !p.starts_with("src/tui/ui") && !p.ends_with("tui/mod.rs"))
        .collect();
    assert!(state.len() > 5, "{state:?}");
    for path in state {
        let text = std::fs::read_to_string(path).unwrap();
        let view = |l: &&str| [" ui::", "::ui::", "(ui::"].iter().any(|v| l.contains(v));
        let calls: Vec<_> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .filter(view)
            .collect();
        assert!(calls.is_empty(), "{} calls the view: {calls:?}", path.display());
    }
}

/// The runner's parts (`calls/`, `catalog/`, `operations/`, `deferral.rs`)
/// borrow what they need and never reach back: none names the `Runner`
/// that composes them or a kind of request built on them (`agent.rs`,
/// `chat.rs`, `embed.rs`, `tool_call.rs`).
#[test]
fn the_runners_parts_never_reach_back_to_it() {
    let mut parts = Vec::new();
    for dir in ["calls", "catalog", "operations"] {
        files(&Path::new("src/runner").join(dir), &mut parts);
    }
    parts.push("src/runner/deferral.rs".into());
    assert!(parts.len() > 12, "{parts:?}");
    let above = [
        "Runner",
        "runner::agent",
        "runner::chat",
        "runner::embed",
        "runner::tool_call",
    ];
    for path in parts {
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let reach: Vec<_> = code
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .filter(|l| {
                above.iter().any(|a| {
                    l.match_indices(a).any(|(i, _)| {
                        let next = l[i + a.len()..].chars().next();
                        !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    })
                })
            })
            .collect();
        assert!(reach.is_empty(), "{} reaches back: {reach:?}", path.display());
    }
}
