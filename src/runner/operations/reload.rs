//! A new config taken while running (`serve` on SIGHUP, or an operator's
//! `reload` command): what can change in place does, every breaker keeping
//! its state and counts; a change that needs a restart refuses the whole
//! reload, so nothing changes. The file is read on a blocking thread
//! within a time bound ([`crate::config::file`]): a FIFO, a huge file or a
//! stalled mount is refused, never waited on by the runtime.

use super::Operations;
use crate::config::Config;
use crate::telemetry::events::EventKind;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The file a reload reads, and the config it was read as at start.
pub struct Source {
    path: PathBuf,
    read_at_start: Config,
    /// A read of the file is under way on a blocking thread (one that
    /// stalled outlives its reload): no other starts meanwhile, so stalled
    /// reads never pile up.
    reading: Arc<AtomicBool>,
}

/// What a runner without a file says to a reload.
const NO_FILE: &str = "no config file to read again (the built-in config does not change)";

/// Clears a [`Source`]'s `reading` when its read ends, however it ends.
struct Reading(Arc<AtomicBool>);

impl Drop for Reading {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Why a reload was refused (nothing changed).
#[derive(Debug, thiserror::Error)]
#[error("the reload changed {what}, which needs a restart; nothing was applied")]
pub struct NeedsRestart {
    /// What, in words.
    pub what: String,
}

/// `v` with every `breaker` member of its objects (one level down) taken
/// out: what a section is, breaker settings apart.
fn without_breakers(v: Value) -> Value {
    match v {
        Value::Object(mut m) => {
            for inner in m.values_mut() {
                if let Value::Object(o) = inner {
                    o.remove("breaker");
                }
            }
            Value::Object(m)
        }
        v => v,
    }
}

/// Whether two `[tools]` tables differ in anything but breaker settings.
pub fn tools_differ(a: &Config, b: &Config) -> bool {
    let json = |c: &Config| without_breakers(serde_json::to_value(&c.tools).unwrap_or(Value::Null));
    json(a) != json(b)
}

/// The sections of a config as JSON, breaker settings apart, by name
/// (`[tools]` apart: a gateway's tools are its MCP servers', see
/// [`tools_differ`]).
fn sections(cfg: &Config) -> Vec<(&'static str, Value)> {
    let json = |v: Result<Value, serde_json::Error>| v.unwrap_or(Value::Null);
    vec![
        (
            "[providers]",
            without_breakers(json(serde_json::to_value(&cfg.providers))),
        ),
        ("[models]", json(serde_json::to_value(&cfg.models))),
        ("[routes]", json(serde_json::to_value(&cfg.routes))),
        ("[limiter]", json(serde_json::to_value(&cfg.limiter))),
        ("[budgets]", json(serde_json::to_value(&cfg.budgets))),
        ("[sessions]", json(serde_json::to_value(&cfg.sessions))),
        ("[retry]", json(serde_json::to_value(&cfg.retry))),
        ("[degradation]", json(serde_json::to_value(&cfg.degradation))),
        ("[state]", json(serde_json::to_value(&cfg.state))),
        ("[keys]", json(serde_json::to_value(&cfg.keys))),
        ("[operators]", json(serde_json::to_value(&cfg.operators))),
        ("[mcp]", json(serde_json::to_value(&cfg.mcp))),
    ]
}

impl Operations<'_> {
    /// Reloads read `path`, which read as `read_at_start` when the runner
    /// was built (set once; later calls change nothing).
    pub fn reload_from(&self, path: PathBuf, read_at_start: Config) {
        let _ = self.source.set(Source {
            path,
            read_at_start,
            reading: Arc::default(),
        });
    }

    /// Reads the config file again and takes what can change in place
    /// ([`Operations::reload`]); what changed, or why nothing did. Said in the
    /// events either way.
    pub async fn reload_file(&self) -> Result<String, String> {
        let read = self.read_reload().await;
        self.reload_read(Some(read))
    }

    /// The config file read again and checked, off the runtime's threads
    /// and within [`crate::limits::CONFIG_READ_TIME`]; or why not.
    pub(super) async fn read_reload(&self) -> Result<Config, String> {
        let Some(src) = self.source.get() else {
            return Err(NO_FILE.into());
        };
        if src.reading.swap(true, Ordering::AcqRel) {
            return Err(format!(
                "the last reload's read of {} has not ended (is its storage stalled?): nothing was applied; reload again once it has",
                src.path.display()
            ));
        }
        let (path, reading) = (src.path.clone(), Reading(src.reading.clone()));
        let read = move || {
            let _reading = reading;
            Config::load(&path)
        };
        // Said in events view-only tokens read: without the file's text.
        crate::config::file::off_runtime(&src.path, crate::limits::CONFIG_READ_TIME, read)
            .await
            .map_err(|e| e.without_text())
    }

    /// Takes a reload's file as [`Operations::read_reload`] read it (`None`:
    /// not read, which only a runner without a file may ask).
    pub(super) fn reload_read(&self, read: Option<Result<Config, String>>) -> Result<String, String> {
        let Some(src) = self.source.get() else {
            return Err(NO_FILE.into());
        };
        let read = read.unwrap_or_else(|| {
            Err(
                "a reload reads its file off the runtime: it is sent with Operations::command, not Operations::apply"
                    .into(),
            )
        });
        let checked = read.and_then(|cfg| {
            if tools_differ(&cfg, &src.read_at_start) {
                return Err("the reload changed [tools], which needs a restart; nothing was applied".to_string());
            }
            self.reload(&cfg).map_err(|e| e.to_string())
        });
        let (changes, applied) = match checked {
            Ok(changes) if changes.is_empty() => ("nothing changed".to_string(), true),
            Ok(changes) => (changes.join("; "), true),
            Err(why) => (why, false),
        };
        self.events.emit(EventKind::Reloaded {
            changes: changes.clone(),
            applied,
        });
        let said = format!("{}: {changes}", src.path.display());
        if applied {
            Ok(said)
        } else {
            Err(said)
        }
    }

    /// Takes `new` (read and validated): each breaker whose settings
    /// changed takes the new ones, keeping its state, counts and window
    /// where it still fits; what changed, in words. Any other change is
    /// refused whole, naming it (the caller compares `[tools]`, which the
    /// runner holds as it was built: [`tools_differ`]).
    pub fn reload(&self, new: &Config) -> Result<Vec<String>, NeedsRestart> {
        let changed: Vec<&str> = sections(self.cfg)
            .into_iter()
            .zip(sections(new))
            .filter(|((_, a), (_, b))| a != b)
            .map(|((name, _), _)| name)
            .collect();
        if !changed.is_empty() {
            return Err(NeedsRestart {
                what: changed.join(", "),
            });
        }
        let now = self.clock.now();
        let mut said = Vec::new();
        for t in self.catalog.registry.iter() {
            let want = match t.target.kind() {
                // A tool the file does not name (an MCP server's) keeps
                // what it was built with, or takes the new default.
                crate::target::Kind::Tool if !new.tools.contains_key(t.target.name()) => self
                    .cfg
                    .tools
                    .get(t.target.name())
                    .and_then(|c| c.breaker.as_ref())
                    .unwrap_or(&new.breaker),
                _ => new.breaker_for(&t.target),
            };
            if **t.config.read() != *want {
                t.breaker.reconfigure(want.clone(), now);
                *t.config.write() = std::sync::Arc::new(want.clone());
                said.push(format!("{}: new breaker settings", t.target));
            }
        }
        Ok(said)
    }
}
