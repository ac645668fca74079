//! Who a request is. A caller by its API key: its calls are the key's
//! user's, whatever a `user` field or header says, and go only where the
//! key may. An operator by its token, with the scope it grants: `view`
//! (metrics, snapshots, events) or `operate` (commands too). Where no keys
//! or tokens are configured, the gateway's one bearer token guards every
//! endpoint (required off loopback), compared in constant time.
//!
//! Keys and tokens are looked up by their SHA-256: the gateway never holds
//! one in clear, and a lookup's timing tells nothing of the secret.

use super::error::GatewayError;
use super::Gateway;
use crate::config::access::{Grant, SecretHash};
use crate::config::{Config, KeyConfig};
use crate::fleet::keys::SharedKeys;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::future::{ready, Either, Ready};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};
use subtle::ConstantTimeEq;
use tower::Service;

/// A caller, as its key says.
#[derive(Debug)]
pub struct Caller {
    /// The key's name (never the key).
    pub key: String,
    /// Whose calls these are.
    pub user: String,
    /// The routes or models it may call (empty: all).
    pub routes: Vec<String>,
    /// The MCP servers it may reach (empty: all).
    pub mcp: Arc<[String]>,
    /// When the key stops working (ms since the Unix epoch).
    pub expires_ms: Option<u64>,
    /// Its calls may name a sub-user for reporting.
    pub sub_users: bool,
    /// The most urgent priority its calls may have.
    pub priority: crate::config::Priority,
    /// The models its routes reach, found on its first call.
    reach: std::sync::OnceLock<Arc<[usize]>>,
}

/// Whom a call is billed to, and the sub-user it names for reporting.
#[derive(Debug, PartialEq)]
pub struct Billed {
    /// Who pays.
    pub user: String,
    /// Whom the caller says it is for, where its key allows that.
    pub sub_user: Option<String>,
}

impl Caller {
    /// The caller a request was let in as, where keys are in use.
    pub(super) fn of(ext: &axum::http::Extensions) -> Option<Arc<Caller>> {
        ext.get::<Arc<Caller>>().cloned()
    }

    /// Why it may not call route or model `name`, if it may not.
    pub fn refusal(&self, name: &str) -> Option<String> {
        if self.routes.is_empty() || self.routes.iter().any(|r| r == name) {
            return None;
        }
        Some(format!(
            "API key `{}` may not call `{name}`; it may call: {}",
            self.key,
            self.routes.join(", ")
        ))
    }

    /// The only models its calls may reach on any hop of a chain: those
    /// of the routes and models its key names (`None`: any).
    pub fn reach(&self, runner: &crate::runner::Runner) -> Option<Arc<[usize]>> {
        if self.routes.is_empty() {
            return None;
        }
        Some(
            self.reach
                .get_or_init(|| runner.catalog().reach_of(&self.routes))
                .clone(),
        )
    }

    /// The user its calls are billed to, whatever `given` (a `user` field
    /// or header) says, which is the sub-user where the key allows one;
    /// without a key, `given`.
    pub fn user_of(caller: Option<&Caller>, given: Option<String>) -> Billed {
        match caller {
            Some(c) => Billed {
                user: c.user.clone(),
                sub_user: given.filter(|g| c.sub_users && *g != c.user),
            },
            None => Billed {
                user: given.unwrap_or_else(|| "anonymous".to_string()),
                sub_user: None,
            },
        }
    }
}

/// An operator, as its token says.
#[derive(Debug)]
pub struct Operator {
    /// The operator's name.
    pub name: String,
    /// What the token grants.
    pub scope: Grant,
}

/// Everyone the gateway knows.
pub(super) struct Access {
    /// The config's keys and the fleet's, less the revoked.
    keys: RwLock<Keys>,
    /// Keys may come from the fleet at any time.
    shared: bool,
    operators: HashMap<SecretHash, Arc<Operator>>,
    /// The one bearer token, where keys or operator tokens are not used.
    token: Option<String>,
}

impl Access {
    /// The keys and operator tokens of `cfg`, and the one bearer token;
    /// `shared`: keys may also come from a fleet ([`Access::refresh`]).
    pub fn new(cfg: &Config, token: Option<String>, shared: bool) -> Self {
        let keys = RwLock::new(Keys {
            callers: callers(cfg.keys.iter(), &Default::default()),
            in_use: !cfg.keys.is_empty(),
        });
        let operators = cfg
            .operators
            .iter()
            .map(|(name, o)| {
                let op = Operator {
                    name: name.clone(),
                    scope: o.scope,
                };
                (o.hash, Arc::new(op))
            })
            .collect();
        Self {
            keys,
            shared,
            operators,
            token,
        }
    }

    /// Takes the fleet's keys: the config's and the fleet's, less those it
    /// revoked.
    pub fn refresh(&self, cfg: &Config, fleet: &SharedKeys) {
        *self.keys.write() = Keys {
            callers: callers(cfg.keys.iter().chain(&fleet.keys), &fleet.revoked),
            // Revoking the last key closes the door; it does not open it.
            in_use: !(cfg.keys.is_empty() && fleet.keys.is_empty() && fleet.revoked.is_empty()),
        };
    }

    /// Whether any request needs checking at all.
    pub fn checks(&self) -> bool {
        self.token.is_some() || self.shared || self.keys.read().in_use || !self.operators.is_empty()
    }

    /// Whether calls need a credential (a caller key or the one token).
    pub fn calls_guarded(&self) -> bool {
        self.token.is_some() || self.keys.read().in_use || self.shared
    }

    /// Why serving beyond loopback would leave a door open, if it would:
    /// calls without caller keys (in the config or, in a fleet, in its
    /// store now) unless `anonymous` calls are allowed, and admin
    /// endpoints without operator tokens.
    pub fn open_door(&self, anonymous: bool) -> Option<&'static str> {
        if self.token.is_some() {
            return None;
        }
        if !anonymous && !self.keys.read().in_use {
            return Some(if self.shared {
                "calls need caller keys, and neither the config ([keys]) nor the fleet's store has any yet (make one with `fusebox keys new NAME --user USER --state URL`, or pass --allow-anonymous to serve every caller as the user it names)"
            } else {
                "calls need caller keys ([keys] in the config) or an auth token (or pass --allow-anonymous to serve every caller as the user it names)"
            });
        }
        if self.operators.is_empty() {
            return Some("the admin endpoints need operator tokens ([operators] in the config) or an auth token");
        }
        None
    }

    /// What an operator should know of who may do what here, said at start.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.admin_closed() {
            notes.push("caller keys are in use and no operator token is configured: /metrics and /_fusebox/* refuse every caller (make a token with `fusebox keys operator NAME --scope operate` and add it under [operators])".to_string());
        }
        notes
    }

    /// The admin endpoints open to no one: caller keys are in use (a key
    /// opens no admin endpoint), and neither an operator token nor the one
    /// token is configured.
    fn admin_closed(&self) -> bool {
        self.operators.is_empty() && self.token.is_none() && self.keys.read().in_use
    }
}

/// The callers by their key's hash.
struct Keys {
    callers: HashMap<SecretHash, Arc<Caller>>,
    /// Keys are in use: a call needs one (once a fleet has had keys, also
    /// when all are revoked).
    in_use: bool,
}

/// The callers of `keys` by their hash, less the `revoked` names.
fn callers<'a>(
    keys: impl Iterator<Item = (&'a String, &'a KeyConfig)>,
    revoked: &std::collections::BTreeSet<String>,
) -> HashMap<SecretHash, Arc<Caller>> {
    keys.filter(|(name, _)| !revoked.contains(*name))
        .map(|(name, k)| {
            let caller = Caller {
                key: name.clone(),
                user: k.user.clone(),
                routes: k.routes.clone(),
                mcp: k.mcp.iter().cloned().collect(),
                expires_ms: k.expires.map(|e| e.unix_ms()),
                sub_users: k.sub_users,
                priority: k.priority,
                reach: Default::default(),
            };
            (k.hash, Arc::new(caller))
        })
        .collect()
}

/// Whether serving `addr` requires credentials (it is not loopback).
pub fn needs_token(addr: &SocketAddr) -> bool {
    !addr.ip().is_loopback()
}

/// What an endpoint asks of whoever calls it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Door {
    /// Health probes: nothing.
    Open,
    /// Model calls: a caller key.
    Call,
    /// Metrics: an operator token that may view.
    View,
    /// Commands: one that may operate.
    Operate,
}

fn door(path: &str) -> Door {
    match path {
        "/healthz" | "/readyz" => Door::Open,
        "/metrics" => Door::View,
        "/_fusebox/commands" => Door::Operate,
        p if p.starts_with("/_fusebox/") => Door::View,
        _ => Door::Call,
    }
}

/// The bearer credential of `req` (the scheme is case-insensitive, RFC
/// 7235), or an empty one.
fn bearer(req: &Request) -> &[u8] {
    req.headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes())
        .filter(|v| v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer "))
        .map_or(&[][..], |v| &v[7..])
}

fn unauthorized(message: &str) -> Response {
    GatewayError::openai(StatusCode::UNAUTHORIZED, message).into_response()
}

/// The 401 or 403 that refuses `req`, OpenAI-shaped; `None` when its
/// credentials open its door, with who it is (a [`Caller`] or an
/// [`Operator`]) then in its extensions.
fn refusal(access: &Access, req: &mut Request) -> Option<Response> {
    let door = door(req.uri().path());
    if door == Door::Open {
        return None;
    }
    let given = bearer(req);
    let hash = || SecretHash::of(&String::from_utf8_lossy(given));
    // Where keys are in use, the caller the key names (read now: no lock
    // is held while the request runs).
    let caller = match door {
        Door::Call => {
            let keys = access.keys.read();
            keys.in_use.then(|| keys.callers.get(&hash()).cloned())
        }
        _ => None,
    };
    match (door, caller) {
        (Door::Call, Some(None)) => Some(unauthorized(
            "missing or unknown API key: send `Authorization: Bearer <key>` with a key this gateway issued",
        )),
        (Door::Call, Some(Some(c))) if c.expires_ms.is_some_and(|at| at <= now_ms()) => Some(unauthorized(&format!(
            "API key `{}` has expired; ask for a new one",
            c.key
        ))),
        (Door::Call, Some(Some(c))) => {
            req.extensions_mut().insert(c);
            None
        }
        (Door::View | Door::Operate, _) if access.admin_closed() => Some(unauthorized(
            "caller keys are in use here and no operator token is configured, so the admin endpoints are closed; an operator token (`fusebox keys operator NAME --scope operate`, under [operators]) opens them",
        )),
        (Door::View | Door::Operate, _) if !access.operators.is_empty() => match access.operators.get(&hash()) {
            None => Some(unauthorized(
                "this endpoint needs an operator token: send `Authorization: Bearer <token>`",
            )),
            Some(op) if door == Door::Operate && op.scope == Grant::View => Some(GatewayError::openai(
                StatusCode::FORBIDDEN,
                format!(
                    "operator {}'s token may view, not operate: commands need an `operate` token",
                    op.name
                ),
            )
            .into_response()),
            Some(op) => {
                req.extensions_mut().insert(op.clone());
                None
            }
        },
        _ => match &access.token {
            Some(t) if !bool::from(given.ct_eq(t.as_bytes())) => Some(unauthorized(
                "missing or wrong bearer token: send `Authorization: Bearer <token>` with the gateway's token",
            )),
            _ => None,
        },
    }
}

/// The door in front of every route: lets a request on to `inner` unless
/// there is a [`refusal`] to answer it with. `gw` is `None` where nothing is
/// checked (no keys or tokens, on loopback). A service around the routes
/// rather than a middleware function, which axum would box on every route
/// for every request.
#[derive(Clone)]
pub(super) struct Checked<S> {
    pub gw: Option<Arc<Gateway>>,
    pub inner: S,
}

impl<S> Service<Request> for Checked<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<Ready<Result<Response, Infallible>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        if let Some(gw) = &self.gw {
            if let Some(refused) = refusal(&gw.access, &mut req) {
                return Either::Left(ready(Ok(refused)));
            }
        }
        Either::Right(self.inner.call(req))
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
