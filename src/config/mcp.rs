//! The MCP servers fusebox stands in front of (`[mcp.NAME]`).

use serde::{Deserialize, Serialize};

/// One upstream MCP server: reached at a Streamable HTTP endpoint, or a
/// stdio server fusebox starts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Its Streamable HTTP endpoint (`http://HOST:PORT/mcp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The command (program and arguments) of a stdio server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// The environment a stdio server starts with, besides `PATH` and
    /// `HOME`: nothing of the gateway's own (its provider keys, its
    /// token) unless named here. A value may take an environment
    /// variable's (`"${GITHUB_TOKEN}"`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    /// Seconds a call may wait for the client to answer what the server
    /// asks it (an elicitation a person answers, a sampling request)
    /// before the server is told no answer came.
    #[serde(default = "ten_minutes", skip_serializing_if = "is_ten_minutes")]
    pub input_timeout_s: u64,
}

fn ten_minutes() -> u64 {
    600
}

fn is_ten_minutes(s: &u64) -> bool {
    *s == ten_minutes()
}

/// What a stdio server inherits of the gateway's environment, unnamed:
/// what finding and running a program needs, and no secret.
pub const INHERITED_ENV: [&str; 2] = ["PATH", "HOME"];

impl McpServerConfig {
    /// The environment its stdio server starts with: [`INHERITED_ENV`]
    /// from the gateway's, then `env` filled from it; `Err` names the
    /// variable a value needs that is not set.
    pub fn environment(&self, name: &str) -> Result<Vec<(String, String)>, String> {
        let mut out: Vec<(String, String)> = INHERITED_ENV
            .iter()
            .filter_map(|&v| Some((v.to_string(), std::env::var(v).ok()?)))
            .collect();
        for (k, v) in &self.env {
            let at = format!("mcp.{name}.env.{k}");
            let value = super::http_tool::Template::parse(v, "${")
                .map_err(|e| format!("{at}: {e}"))?
                .fill(|var| std::env::var(var).ok())
                .map_err(|var| format!("{at}: environment variable {var} is not set; export it"))?;
            out.retain(|(name, _)| name != k);
            out.push((k.clone(), value));
        }
        Ok(out)
    }
}
