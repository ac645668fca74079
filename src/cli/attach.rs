//! `fusebox attach`: the console over running gateways, found by URL or
//! from a fleet's heartbeats.

use super::args::{ConsoleArgs, Speed};
use super::run::Ui;
use crate::attach::{parse_url, AttachError, Hub};
use crate::tui::app::{Mode, Options};
use anyhow::{bail, Context, Result};
use std::time::Duration;

/// How long attach waits for the instances to answer before the console
/// opens (those still silent show as connecting).
const FIRST_WORD: Duration = Duration::from_secs(3);
/// How often a fleet's heartbeats are read for new instances.
const DISCOVER_EVERY: Duration = Duration::from_secs(2);
/// How long an instance that left the fleet's heartbeats stays on screen,
/// stale, before it is dropped.
const GONE_AFTER: Duration = Duration::from_secs(60);

/// `fusebox attach`'s options.
#[derive(clap::Args)]
pub struct AttachArgs {
    /// The instances' addresses (`http://HOST:PORT`, as `fusebox serve
    /// --listen` gave them).
    pub urls: Vec<String>,
    /// Also watch every instance whose heartbeat is in this Redis store
    /// (`redis://HOST:PORT/DB`), as they come and go.
    #[arg(long)]
    pub state: Option<String>,
    /// Environment variable holding the operator token to send (a `view`
    /// token watches, an `operate` token also commands).
    #[arg(long)]
    pub token_env: Option<String>,
    /// The console.
    #[command(flatten)]
    pub console: ConsoleArgs,
}

/// Attaches until the operator quits.
pub fn attach(args: AttachArgs) -> Result<()> {
    let token = match &args.token_env {
        Some(var) => match std::env::var(var) {
            Ok(t) if !t.trim().is_empty() => Some(t.trim().to_string()),
            _ => bail!("--token-env {var}: the variable {var} is not set or empty; export it with your operator token"),
        },
        None => None,
    };
    if args.urls.is_empty() && args.state.is_none() {
        bail!(AttachError::Nothing);
    }
    for u in &args.urls {
        parse_url(u)?;
    }
    if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        bail!("fusebox attach is a console and needs a terminal, but stdout is not a TTY; without one, read a gateway's GET /_fusebox/snapshot or /metrics");
    }
    let ui = Ui::setup(false, &args.console, Speed::Factor(1.0), "attach")?.context("the console needs a terminal")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let mut urls = args.urls.clone();
        if let Some(state) = &args.state {
            urls.extend(crate::fleet::admin_urls(state).await?);
        }
        let (hub, feed) = Hub::start(&urls, token)?;
        if let Some(state) = args.state.clone() {
            let given = args
                .urls
                .iter()
                .filter_map(|u| parse_url(u).ok())
                .map(|(b, _)| b)
                .collect();
            tokio::spawn(discover(std::sync::Arc::downgrade(&hub), state, given));
        }
        hub.settled(FIRST_WORD).await;
        let instances = hub.instances();
        if !instances.is_empty() && instances.iter().all(|i| i.failed().is_some()) {
            let why: Vec<String> = instances
                .iter()
                .map(|i| format!("{}: {}", i.name, i.failed().unwrap_or_default()))
                .collect();
            bail!("no instance answered: {}", why.join("; "));
        }
        let source = match &args.state {
            Some(s) => format!("fleet {s}"),
            None => format!("{} instance(s)", instances.len()),
        };
        let opts = Options {
            mode: Mode::Attach,
            readonly: args.console.readonly_reason().or_else(|| hub.readonly()),
            yes: args.console.yes,
            operator: args.console.operator_name(),
            source,
            replay_length_ms: None,
            replay: None,
        };
        ui.console(feed, opts).await
    })
}

/// Adds the instances that start beating in the fleet at `state`, and
/// drops those that stopped long ago (not those `given` by URL).
async fn discover(hub: std::sync::Weak<Hub>, state: String, given: Vec<String>) {
    loop {
        tokio::time::sleep(DISCOVER_EVERY).await;
        let Some(hub) = hub.upgrade() else { return };
        match crate::fleet::admin_urls(&state).await {
            Ok(urls) => {
                let found: Vec<(String, String)> = urls.iter().filter_map(|u| parse_url(u).ok()).collect();
                let bases: Vec<String> = found
                    .iter()
                    .map(|(b, _)| b.clone())
                    .chain(given.iter().cloned())
                    .collect();
                for (base, name) in found {
                    hub.add(base, name);
                }
                hub.forget_lost(&bases, GONE_AFTER);
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the fleet's heartbeats"),
        }
    }
}
