//! Shared test helpers: a scripted provider and runner builders.

pub mod mcp;
pub mod otlp;
pub mod redis;
pub mod seeds;
pub mod strict;
pub mod strict_bedrock;
pub mod strict_gemini;
pub mod strict_vertex;

use fusebox::clock::{Clock, Seed};
use fusebox::config::Config;
use fusebox::provider::{ErrorKind, LlmRequest, LlmResponse, Message, Provider, ProviderError, ToolCall, Usage};
use fusebox::request::AgentRequest;
use fusebox::runner::{Runner, RunnerParts};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What a scripted provider does on one call.
#[derive(Clone, Debug)]
pub enum Step {
    /// Answer after `delay_ms` with `output` tokens and these tool calls.
    Ok {
        delay_ms: u64,
        output: u32,
        tool_calls: Vec<ToolCall>,
    },
    /// Fail with an HTTP status after `delay_ms`.
    Status {
        code: u16,
        retry_after_ms: Option<u64>,
        delay_ms: u64,
    },
}

impl Step {
    pub fn ok() -> Self {
        Step::Ok {
            delay_ms: 100,
            output: 50,
            tool_calls: vec![],
        }
    }
    pub fn status(code: u16) -> Self {
        Step::Status {
            code,
            retry_after_ms: None,
            delay_ms: 10,
        }
    }
}

/// A provider that plays a script, then repeats its default step.
pub struct Scripted {
    script: Mutex<VecDeque<Step>>,
    default: Step,
    pub calls: AtomicU32,
    pub seen: Mutex<Vec<(u32, u32)>>, // (attempt, max_tokens)
}

impl Scripted {
    pub fn new(script: Vec<Step>, default: Step) -> Arc<Self> {
        Arc::new(Self {
            script: Mutex::new(script.into()),
            default,
            calls: AtomicU32::new(0),
            seen: Mutex::new(Vec::new()),
        })
    }
    pub fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl Provider for Scripted {
    async fn complete(&self, req: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.seen.lock().push((req.attempt, req.max_tokens));
        let step = self.script.lock().pop_front().unwrap_or_else(|| self.default.clone());
        match step {
            Step::Ok {
                delay_ms,
                output,
                mut tool_calls,
            } => {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                if req.tools.is_empty() {
                    tool_calls.clear();
                }
                Ok(LlmResponse {
                    text: "answer".into(),
                    tool_calls,
                    tool_keys: Vec::new(),
                    usage: Usage {
                        input: 20,
                        output,
                        cached_input: 0,
                    },
                    tokens_per_s: None,
                    rate: None,
                    wire: None,
                })
            }
            Step::Status {
                code,
                retry_after_ms,
                delay_ms,
            } => {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                let mut e = ProviderError::new(ErrorKind::from_status(code), Some(code), format!("HTTP {code}"));
                e.retry_after = retry_after_ms.map(Duration::from_millis);
                Err(e)
            }
        }
    }
}

/// A runner over the default config with some providers replaced.
pub fn runner(cfg: Config, providers: Vec<(&str, Arc<dyn Provider>)>, spool: Option<PathBuf>) -> Arc<Runner> {
    let mut parts = RunnerParts::mock(Clock::with_wall_anchor(0), Seed(7));
    for (name, p) in providers {
        parts.providers.insert(name.to_string(), p);
    }
    parts.spool = spool;
    Runner::new(cfg, parts).expect("runner")
}

/// A one-step LLM request without tools.
pub fn ask(id: u64, user: &str) -> AgentRequest {
    AgentRequest {
        id,
        user: user.into(),
        session: format!("{user}/s").into(),
        route: "default".into(),
        messages: [Message::system("be brief"), Message::user("Where is order #38291?")].into(),
        tools: vec![],
        critical_tools: vec![],
        max_tokens: 256,
        max_steps: 2,
        priority: None,
        tenant: None,
        choices: None,
        reach: None,
        stream: false,
        sub_user: None,
    }
}

/// A request offering every default tool.
pub fn ask_with_tools(id: u64, user: &str) -> AgentRequest {
    AgentRequest {
        tools: vec![
            "get_order".into(),
            "lookup_shipping".into(),
            "search_docs".into(),
            "send_notification".into(),
        ],
        max_steps: 4,
        ..ask(id, user)
    }
}

/// The tool call a model makes for get_order.
pub fn get_order_call() -> ToolCall {
    ToolCall::new("call_get_order", "get_order", r#"{"order_id":"38291"}"#)
}

/// A child `fusebox serve` on the demo's mock providers, killed on drop.
pub struct Serve {
    child: std::process::Child,
    /// `http://127.0.0.1:PORT`, the gateway's root.
    pub base: String,
}

impl Serve {
    /// Starts it and reads the address it prints.
    pub fn start() -> Self {
        Self::start_on("127.0.0.1:0")
    }

    /// Starts it listening on `listen`.
    pub fn start_on(listen: &str) -> Self {
        Self::start_with(&["--listen", listen])
    }

    /// Starts it with `args` (`--listen 127.0.0.1:0` unless they say).
    pub fn start_with(args: &[&str]) -> Self {
        Self::start_with_env(args, &[])
    }

    /// Starts it with `args` and the environment variables `envs` too.
    pub fn start_with_env(args: &[&str], envs: &[(&str, &str)]) -> Self {
        Self::start_in(std::process::Command::new(env!("CARGO_BIN_EXE_fusebox")), args, envs)
    }

    /// Starts it with `args` and `envs`, allowed `files` open files at
    /// most (soft and hard limits, as `ulimit -n` sets them).
    pub fn start_with_open_files(files: u32, args: &[&str], envs: &[(&str, &str)]) -> Self {
        let mut sh = std::process::Command::new("sh");
        sh.args(["-c", "ulimit -n \"$0\" && exec \"$@\""])
            .arg(files.to_string())
            .arg(env!("CARGO_BIN_EXE_fusebox"));
        Self::start_in(sh, args, envs)
    }

    fn start_in(mut cmd: std::process::Command, args: &[&str], envs: &[(&str, &str)]) -> Self {
        let listen = if args.contains(&"--listen") {
            &[][..]
        } else {
            &["--listen", "127.0.0.1:0"][..]
        };
        let child = cmd
            .args(["serve", "--headless"])
            .args(listen)
            .args(args)
            .envs(envs.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run fusebox serve");
        Self::started(child)
    }

    /// A `fusebox serve` started some other way (its stderr piped), once
    /// it says where it serves: notes may come first, the line with its
    /// address says it serves.
    pub fn started(mut child: std::process::Child) -> Self {
        use std::io::BufRead;
        let mut said = String::new();
        let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let base = loop {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap() == 0 {
                panic!("no base URL in `{said}`");
            }
            said.push_str(&line);
            if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) {
                break url.trim_end_matches("/v1").to_string();
            }
        };
        // The rest is read and dropped: a writer to a closed pipe may die
        // of SIGPIPE (a runtime in front of fusebox, as Go's does).
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        Serve { child, base }
    }

    /// Waits (real time, up to 5 s) until its listener is closed, as
    /// SIGTERM closes it.
    pub async fn until_closed(&self) {
        let host = self.base.trim_start_matches("http://").to_string();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while tokio::net::TcpStream::connect(&host).await.is_ok() {
            assert!(std::time::Instant::now() < deadline, "still accepting after SIGTERM");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await; // the signal reaching the other process
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends it signal `sig` (`TERM`, `INT`, `HUP`).
    pub fn signal(&self, sig: &str) {
        let sent = std::process::Command::new("kill")
            .args([format!("-{sig}"), self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{sig}");
    }

    /// Waits for it to exit; how it did.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().expect("wait for fusebox serve")
    }

    /// Kills it, as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its open files now.
    pub fn open_files(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .unwrap()
            .count()
    }

    /// Resident memory now (kB).
    pub fn rss_kb(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cmd` run by a shell in a terminal of its own (`script`, from
/// util-linux, gives it a pty), what it draws written to `typescript`;
/// its keys are typed on the child's stdin.
pub fn in_a_terminal(cmd: &str, typescript: &std::path::Path) -> std::process::Child {
    std::process::Command::new("script")
        .args(["-qfec", cmd])
        .arg(typescript)
        .env("TERM", "xterm-256color")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("run script (util-linux)")
}

/// A whole chat request `id` of the default route asking where order
/// #38100 is.
pub fn chat_request(id: u64) -> fusebox::runner::chat::ChatRequest {
    fusebox::runner::chat::ChatRequest {
        id,
        user: "u".into(),
        sub_user: None,
        session: None,
        route: "default".into(),
        messages: vec![fusebox::wire::Message::new(
            fusebox::wire::Role::User,
            "Where is order #38100?",
        )]
        .into(),
        tools: Vec::new().into(),
        max_tokens: 64,
        params: Default::default(),
        stream: false,
        fallback: true,
        reach: None,
        deadline_ms: None,
        key: None,
        priority: None,
        tenant: None,
    }
}

/// The default route hedging after `ms`, between gpt-4o (slow: 5 s) and
/// claude-haiku (0.1 s, 20 + 50 tokens): the runner and the two providers.
pub fn hedging(ms: u64) -> (Arc<Runner>, Arc<Scripted>, Arc<Scripted>) {
    let mut cfg = Config::default();
    let route = cfg.routes.get_mut("default").unwrap();
    route.chain = vec!["gpt-4o".into(), "claude-haiku".into()];
    route.hedge = fusebox::config::Hedge::AfterMs(ms);
    let slow = Step::Ok {
        delay_ms: 5_000,
        output: 50,
        tool_calls: vec![],
    };
    let openai = Scripted::new(vec![], slow);
    let anthropic = Scripted::new(vec![], Step::ok());
    let r = runner(
        cfg,
        vec![
            ("openai", openai.clone() as Arc<dyn Provider>),
            ("anthropic", anthropic.clone() as Arc<dyn Provider>),
        ],
        None,
    );
    (r, openai, anthropic)
}

/// A caller key with `secret` for `user`: every route and MCP server, no
/// budgets of its own.
pub fn caller_key(secret: &str, user: &str) -> fusebox::config::KeyConfig {
    fusebox::config::KeyConfig {
        hash: fusebox::config::access::SecretHash::of(secret),
        user: user.into(),
        routes: Vec::new(),
        mcp: Vec::new(),
        expires: None,
        budgets: None,
        sub_users: false,
        priority: Default::default(),
    }
}

/// The registry's entry of `target` (`model:gpt-4o`, `provider:openai`,
/// `tool:search`): its breaker, stats and limits.
pub fn entry<'r>(r: &'r Runner, target: &str) -> &'r fusebox::runner::registry::Entry {
    let t: fusebox::target::Target = target.parse().expect("a target");
    r.catalog().registry().find(&t).unwrap_or_else(|| panic!("no {target}"))
}

/// Provider `name` as the runner's catalog holds it: its limiter, its
/// breaker target, its timeout.
pub fn provider_slot<'r>(r: &'r Runner, name: &str) -> &'r fusebox::runner::ProviderSlot {
    let providers = r.catalog().providers();
    providers
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no provider {name}"))
}
