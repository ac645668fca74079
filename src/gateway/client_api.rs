//! Each client API as the gateway serves it: how its request is read,
//! which of its headers go on with its body, its error body, its whole
//! answer and its stream writer. A handler names the [`Api`] its path
//! speaks and calls through here; nothing else in the gateway matches on
//! the API.

use crate::wire::{anthropic, openai, responses, Api, BadRequest, Delta, Reply, Request};
use axum::http::HeaderValue;
use axum::http::{HeaderMap, HeaderName};
use serde_json::Value;

/// A client: its API and what its answer's form depends on.
#[derive(Clone, Debug)]
pub(super) struct Client {
    pub api: Api,
    /// It asked for usage in its stream (chat completions).
    pub include_usage: bool,
    /// What a Responses answer echoes of the request.
    pub echo: Option<responses::Echo>,
}

/// The gateway's side of each API.
impl Api {
    /// Whether this API's clients take an upstream's answer in `upstream`'s
    /// API as it was sent (no upstream speaks Responses).
    pub(super) fn takes_as_sent(self, upstream: Api) -> bool {
        self == upstream && self != Api::Responses
    }

    /// The client's request, read.
    pub(super) fn parse(self, body: &[u8]) -> Result<Request, BadRequest> {
        match self {
            Api::Chat => openai::parse_request(body),
            Api::Messages => anthropic::parse_request(body),
            Api::Responses => responses::parse_request(body),
        }
    }

    /// The client's headers that only this API reads, to send on with its
    /// body (every value of each, in order).
    pub(super) fn own_headers(self, headers: &HeaderMap) -> Vec<(HeaderName, HeaderValue)> {
        // As header names, not text a lookup would parse each time.
        static CHAT: [HeaderName; 1] = [HeaderName::from_static("openai-beta")];
        static MESSAGES: [HeaderName; 2] = [
            HeaderName::from_static("anthropic-version"),
            HeaderName::from_static("anthropic-beta"),
        ];
        let names: &'static [HeaderName] = match self {
            Api::Chat => &CHAT,
            Api::Messages => &MESSAGES,
            Api::Responses => &[],
        };
        names
            .iter()
            .flat_map(|n| headers.get_all(n).iter().map(move |v| (n.clone(), v.clone())))
            .collect()
    }

    /// An error body in this API's shape.
    pub(super) fn error_body(self, status: u16, message: &str, param: Option<&str>) -> Value {
        match self {
            Api::Chat | Api::Responses => openai::error(status, message, param),
            Api::Messages => anthropic::error(status, message),
        }
    }

    /// The id fusebox gives request `n`'s answer when its upstream gave none.
    pub(super) fn reply_id(self, n: u64) -> String {
        match self {
            Api::Chat => format!("chatcmpl-{:016x}", crate::clock::mix(n)),
            Api::Messages | Api::Responses => format!("msg_{:016x}", crate::clock::mix(n)),
        }
    }

    /// A whole answer to request `n` written in this API.
    pub(super) fn render(self, client: &Client, n: u64, reply: &Reply) -> Value {
        match self {
            Api::Chat => openai::render_reply(&frame(&reply.id, &reply.model), reply),
            Api::Messages => anthropic::render_reply(&reply.id, &reply.model, reply),
            Api::Responses => responses::render_reply(
                &responses::Ids::new(crate::clock::mix(n)),
                client.echo.as_ref().unwrap_or(&responses::Echo::default()),
                unix_now(),
                reply,
            ),
        }
    }
}

/// A chat completion's frame as fusebox writes it.
fn frame(id: &str, model: &str) -> openai::Frame {
    openai::Frame {
        id: id.to_string(),
        model: model.to_string(),
        created: unix_now(),
        dialect: openai::Dialect::OpenAi,
    }
}

/// Unix seconds now (the `created` of an answer fusebox writes).
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Writes an answer's pieces as a stream in the client's API.
pub(super) enum Writer {
    Chat(openai::ChunkWriter),
    Messages(anthropic::EventWriter),
    Responses(Box<responses::ResponsesEventWriter>),
}

impl Writer {
    /// A writer of request `n`'s answer `id` from `model` for `client`.
    pub(super) fn new(client: &Client, n: u64, id: &str, model: &str) -> Self {
        match client.api {
            Api::Chat => Writer::Chat(openai::ChunkWriter::new(
                frame(
                    &if id.is_empty() {
                        Api::Chat.reply_id(n)
                    } else {
                        id.to_string()
                    },
                    model,
                ),
                client.include_usage,
            )),
            Api::Messages => Writer::Messages(anthropic::EventWriter::new(id, model)),
            Api::Responses => Writer::Responses(Box::new(responses::ResponsesEventWriter::new(
                responses::Ids::new(crate::clock::mix(n)),
                client.echo.clone().unwrap_or_default(),
                model,
                unix_now(),
            ))),
        }
    }

    /// Writes `d`.
    pub(super) fn write(&mut self, d: &Delta, out: &mut Vec<u8>) {
        match self {
            Writer::Chat(w) => w.write(d, out),
            Writer::Messages(w) => w.write(d, out),
            Writer::Responses(w) => w.write(d, out),
        }
    }

    /// Takes note of `d`, sent as the upstream wrote it.
    pub(super) fn observe(&mut self, d: &Delta) {
        match self {
            Writer::Chat(w) => w.observe(d),
            Writer::Messages(w) => w.observe(d),
            Writer::Responses(w) => w.write(d, &mut Vec::new()),
        }
    }

    /// An error event ending a stream cut short.
    pub(super) fn fail(&mut self, kind: &str, message: &str, out: &mut Vec<u8>) {
        match self {
            Writer::Chat(_) => openai::error_chunk(kind, message, out),
            Writer::Messages(_) => anthropic::error_event(kind, message, out),
            Writer::Responses(w) => w.fail(kind, message, out),
        }
    }

    /// A chat completion's chunks name the model that wrote them; the
    /// other APIs name one model, at their start.
    pub(super) fn rename(&mut self, model: &str) {
        if let Writer::Chat(w) = self {
            w.rename(model);
        }
    }
}
