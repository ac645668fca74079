//! Where each name at `/mcp` is found. With one server every name (tool,
//! prompt, resource URI, template) reaches the client as the server gives
//! it and every request goes to it. With several, a tool or prompt name
//! two servers share is offered as `SERVER__NAME` (the rest as they are),
//! and a resource goes to the server that listed its URI, else to the one
//! whose template's fixed start it matches longest. What a server lists
//! first when fusebox starts places it.

use rmcp::model::ServerCapabilities;
use rmcp::service::{Peer, RoleClient, ServiceError};
use std::collections::{HashMap, HashSet};

/// What a server offers besides tools; each runs as a tool of its own
/// per server (`SERVER/resources`, …): its breaker, pool and timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// `resources/*`: list, templates, read, subscribe, unsubscribe.
    Resources,
    /// `prompts/*`: list, get.
    Prompts,
    /// `completion/complete`.
    Completion,
    /// `logging/setLevel`.
    Logging,
}

impl Family {
    /// Every family.
    pub const ALL: [Family; 4] = [Family::Resources, Family::Prompts, Family::Completion, Family::Logging];

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Resources => "resources",
            Family::Prompts => "prompts",
            Family::Completion => "completion",
            Family::Logging => "logging",
        }
    }

    /// The tool its requests to server `server` run as (no MCP tool name
    /// has a `/`).
    pub fn tool(self, server: &str) -> String {
        format!("{server}/{}", self.as_str())
    }

    /// Whether a server with `caps` offers it.
    pub fn offered_by(self, caps: &ServerCapabilities) -> bool {
        match self {
            Family::Resources => caps.resources.is_some(),
            Family::Prompts => caps.prompts.is_some(),
            Family::Completion => caps.completions.is_some(),
            Family::Logging => caps.logging.is_some(),
        }
    }
}

/// What one server listed of its prompts and resources.
#[derive(Debug, Default)]
pub struct ServerListing {
    prompts: Vec<String>,
    resources: Vec<String>,
    templates: Vec<String>,
}

impl ServerListing {
    /// What the server `name` at `peer`, offering `caps`, lists now; a list
    /// it cannot give is empty (and logged): its names are then found only
    /// where they match another's, or with one server.
    pub async fn list(name: &str, peer: &Peer<RoleClient>, caps: &ServerCapabilities) -> Self {
        fn or_empty<T>(name: &str, what: &str, r: Result<Vec<T>, ServiceError>) -> Vec<T> {
            r.unwrap_or_else(|e| {
                tracing::warn!(server = %name, "MCP server would not list its {what}: {e}");
                Vec::new()
            })
        }
        let mut c = ServerListing::default();
        if caps.prompts.is_some() {
            let listed = or_empty(name, "prompts", peer.list_all_prompts().await);
            c.prompts = listed.into_iter().map(|p| p.name).collect();
        }
        if caps.resources.is_some() {
            let listed = or_empty(name, "resources", peer.list_all_resources().await);
            c.resources = listed.into_iter().map(|r| r.uri).collect();
            let listed = or_empty(name, "resource templates", peer.list_all_resource_templates().await);
            c.templates = listed.into_iter().map(|t| t.uri_template).collect();
        }
        c
    }
}

/// Where the prompts and resources of the servers are found.
#[derive(Debug, Default)]
pub struct Names {
    servers: Vec<String>,
    /// Prompt names two servers share.
    shared: HashSet<String>,
    /// A prompt's server, by its name (those not shared).
    prompts: HashMap<String, usize>,
    /// A resource's server, by its URI.
    resources: HashMap<String, usize>,
    /// Each template's fixed start (up to its first `{`) and its server,
    /// longest first.
    templates: Vec<(String, usize)>,
}

impl Names {
    /// The names of `servers` (in order) from what each listed
    /// (`catalogs`: none where there is one server).
    pub fn new(servers: &[&str], catalogs: Vec<ServerListing>) -> Self {
        let mut n = Names {
            servers: servers.iter().map(|s| s.to_string()).collect(),
            ..Names::default()
        };
        let mut count: HashMap<&str, usize> = HashMap::new();
        for p in catalogs.iter().flat_map(|c| &c.prompts) {
            *count.entry(p).or_default() += 1;
        }
        for (server, c) in catalogs.iter().enumerate() {
            for p in &c.prompts {
                if count[p.as_str()] > 1 {
                    n.shared.insert(p.clone());
                } else {
                    n.prompts.insert(p.clone(), server);
                }
            }
            for r in &c.resources {
                n.resources.entry(r.clone()).or_insert(server);
            }
            for t in &c.templates {
                let fixed = t.split('{').next().unwrap_or_default();
                n.templates.push((fixed.to_string(), server));
            }
        }
        n.templates.sort_by_key(|(fixed, _)| std::cmp::Reverse(fixed.len()));
        n
    }

    fn single(&self) -> bool {
        self.servers.len() == 1
    }

    /// The server and its own name of the prompt offered as `name`.
    pub fn prompt(&self, name: &str) -> Option<(usize, String)> {
        if self.single() {
            return Some((0, name.to_string()));
        }
        if let Some(&server) = self.prompts.get(name) {
            return Some((server, name.to_string()));
        }
        let (server, own) = name.split_once("__")?;
        let i = self.servers.iter().position(|s| s == server)?;
        self.shared.contains(own).then(|| (i, own.to_string()))
    }

    /// The name server `server`'s prompt `own` is offered as.
    pub fn prompt_as(&self, server: usize, own: &str) -> String {
        if self.shared.contains(own) {
            format!("{}__{own}", self.servers[server])
        } else {
            own.to_string()
        }
    }

    /// The server of the resource at `uri`.
    pub fn resource(&self, uri: &str) -> Option<usize> {
        if self.single() {
            return Some(0);
        }
        if let Some(&server) = self.resources.get(uri) {
            return Some(server);
        }
        self.templates
            .iter()
            .find(|(fixed, _)| !fixed.is_empty() && uri.starts_with(fixed.as_str()))
            .map(|&(_, server)| server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(prompts: &[&str], resources: &[&str], templates: &[&str]) -> ServerListing {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        ServerListing {
            prompts: v(prompts),
            resources: v(resources),
            templates: v(templates),
        }
    }

    #[test]
    fn one_server_s_names_are_its_own() {
        let n = Names::new(&["everything"], Vec::new());
        assert_eq!(n.prompt("greet"), Some((0, "greet".into())));
        assert_eq!(n.prompt_as(0, "greet"), "greet");
        assert_eq!(n.resource("test://anything"), Some(0));
    }

    #[test]
    fn several_servers_names_never_collide() {
        let n = Names::new(
            &["docs", "files"],
            vec![
                catalog(&["greet", "summarise"], &["docs://index"], &["docs://page/{id}"]),
                catalog(
                    &["greet"],
                    &["file:///etc/motd"],
                    &["file:///{path}", "docs://page/special/{id}"],
                ),
            ],
        );
        assert_eq!(n.prompt("summarise"), Some((0, "summarise".into())));
        assert_eq!(n.prompt("greet"), None, "shared: only under a server's name");
        assert_eq!(n.prompt_as(1, "greet"), "files__greet");
        assert_eq!(n.prompt("files__greet"), Some((1, "greet".into())));
        assert_eq!(n.prompt("docs__summarise"), None, "not shared: under its own name");
        assert_eq!(n.resource("docs://index"), Some(0));
        assert_eq!(n.resource("file:///etc/motd"), Some(1));
        assert_eq!(n.resource("docs://page/7"), Some(0));
        assert_eq!(n.resource("docs://page/special/7"), Some(1), "the longest fixed start");
        assert_eq!(n.resource("gopher://x"), None);
    }
}
