//! How an `http` tool is called: its method, its URL template (`{arg}`
//! takes an argument's value) and its headers (`${VAR}` takes an
//! environment variable's, which is where credentials must come from).

use serde::{Deserialize, Serialize};

/// How a tool is called.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolBackend {
    /// The built-in mock tool (the demo's), or a tool of an MCP server.
    #[default]
    Mock,
    /// An HTTP API: `method`, `url` and `headers`.
    Http,
}

impl ToolBackend {
    /// Whether it is the default.
    pub fn is_mock(&self) -> bool {
        *self == ToolBackend::Mock
    }
}

/// The HTTP methods an `http` tool may use.
pub const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

/// One piece of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TemplatePiece {
    /// Text as written.
    Text(String),
    /// The value of the argument or variable of this name.
    Slot(String),
}

/// A parsed template: `{name}` slots in a URL, `${NAME}` in a header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template(pub Vec<TemplatePiece>);

impl Template {
    /// Parses `text`, whose slots open with `open` (`"{"` or `"${"`) and
    /// close with `}`; a slot's name is letters, digits and `_`.
    pub fn parse(text: &str, open: &str) -> Result<Self, String> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some(i) = rest.find(open) {
            if i > 0 {
                pieces.push(TemplatePiece::Text(rest[..i].to_string()));
            }
            let after = &rest[i + open.len()..];
            let Some(end) = after.find('}') else {
                return Err(format!(
                    "`{open}` at byte {} is never closed with `}}`",
                    text.len() - rest.len() + i
                ));
            };
            let name = &after[..end];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!(
                    "`{open}{name}}}` is not a slot: a name is letters, digits and `_`"
                ));
            }
            pieces.push(TemplatePiece::Slot(name.to_string()));
            rest = &after[end + 1..];
        }
        if !rest.is_empty() {
            pieces.push(TemplatePiece::Text(rest.to_string()));
        }
        Ok(Self(pieces))
    }

    /// The slots' names, in order.
    pub fn slots(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter_map(|p| match p {
            TemplatePiece::Slot(s) => Some(s.as_str()),
            TemplatePiece::Text(_) => None,
        })
    }

    /// The text with each slot filled by `fill`, or the first slot it
    /// cannot fill.
    pub fn fill(&self, mut fill: impl FnMut(&str) -> Option<String>) -> Result<String, &str> {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                TemplatePiece::Text(t) => out.push_str(t),
                TemplatePiece::Slot(s) => out.push_str(&fill(s).ok_or(s.as_str())?),
            }
        }
        Ok(out)
    }
}

/// Whether a header carries a credential, whose value must then come
/// from an environment variable rather than the config file.
pub fn is_credential(header: &str) -> bool {
    let h = header.to_ascii_lowercase();
    ["authorization", "proxy-authorization", "cookie"].contains(&h.as_str())
        || ["key", "token", "secret", "password"].iter().any(|w| h.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse_fill_and_say_what_is_wrong() {
        let t = Template::parse("http://h/orders/{order_id}/items/{n}", "{").unwrap();
        assert_eq!(t.slots().collect::<Vec<_>>(), ["order_id", "n"]);
        let filled = t.fill(|s| Some(format!("<{s}>"))).unwrap();
        assert_eq!(filled, "http://h/orders/<order_id>/items/<n>");
        assert_eq!(t.fill(|s| (s == "order_id").then(|| "1".into())), Err("n"));
        let h = Template::parse("Bearer ${ORDERS_TOKEN}", "${").unwrap();
        assert_eq!(h.slots().collect::<Vec<_>>(), ["ORDERS_TOKEN"]);
        assert!(Template::parse("http://h/{id", "{")
            .unwrap_err()
            .contains("never closed"));
        assert!(Template::parse("http://h/{a-b}", "{")
            .unwrap_err()
            .contains("not a slot"));
        assert!(is_credential("Authorization") && is_credential("X-Api-Key") && !is_credential("Accept"));
    }
}
