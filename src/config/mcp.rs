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
}
