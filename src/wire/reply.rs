//! An answer in typed form, whichever API it came in, and the streamed
//! pieces it is made of: what the clients read, the mock server writes and
//! the gateway translates when a model of another API answers.

use super::message::ToolCall;
use serde::{Deserialize, Serialize};

/// Token usage of a call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input: u32,
    /// Completion tokens.
    pub output: u32,
    /// Prompt tokens served from the provider's cache.
    pub cached_input: u32,
}

impl Usage {
    /// Takes in what a stream says of its usage so far: each count is the
    /// largest said (Anthropic says input and output in different events).
    pub fn merge(&mut self, u: &Usage) {
        self.input = self.input.max(u.input);
        self.output = self.output.max(u.output);
        self.cached_input = self.cached_input.max(u.cached_input);
    }

    /// Input and output (saturating: the counts are the upstream's word).
    pub fn total(self) -> u32 {
        self.input.saturating_add(self.output)
    }
}

/// Why the model stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Finish {
    /// It finished (OpenAI `stop`, Anthropic `end_turn` / `stop_sequence`).
    #[default]
    Stop,
    /// It hit the output cap (`length` / `max_tokens`).
    Length,
    /// It called tools (`tool_calls` / `tool_use`).
    ToolCalls,
    /// It refused or was filtered (`content_filter` / `refusal`).
    Filtered,
}

impl Finish {
    /// OpenAI's `finish_reason`.
    pub fn openai(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::ToolCalls => "tool_calls",
            Finish::Filtered => "content_filter",
        }
    }

    /// From OpenAI's `finish_reason`.
    pub fn from_openai(s: &str) -> Self {
        match s {
            "length" => Finish::Length,
            "tool_calls" | "function_call" => Finish::ToolCalls,
            "content_filter" => Finish::Filtered,
            _ => Finish::Stop,
        }
    }

    /// Anthropic's `stop_reason`.
    pub fn anthropic(self) -> &'static str {
        match self {
            Finish::Stop => "end_turn",
            Finish::Length => "max_tokens",
            Finish::ToolCalls => "tool_use",
            Finish::Filtered => "refusal",
        }
    }

    /// From Anthropic's `stop_reason`.
    pub fn from_anthropic(s: &str) -> Self {
        match s {
            "max_tokens" | "model_context_window_exceeded" => Finish::Length,
            "tool_use" => Finish::ToolCalls,
            "refusal" => Finish::Filtered,
            _ => Finish::Stop,
        }
    }
}

/// A whole answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reply {
    /// The upstream's id of the answer (`chatcmpl-…`, `msg_…`).
    pub id: String,
    /// The model that answered, as the upstream names it.
    pub model: String,
    /// Text.
    pub text: String,
    /// Reasoning text, where the provider returns it.
    pub reasoning: String,
    /// A refusal.
    pub refusal: String,
    /// Tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped (absent: not said).
    pub finish: Option<Finish>,
    /// Usage, when the upstream said.
    pub usage: Option<Usage>,
}

impl Reply {
    /// The answer as a stream says it: start, content, finish, usage, end.
    pub fn deltas(&self) -> Vec<Delta> {
        let mut out = vec![Delta::Start {
            id: self.id.clone(),
            model: self.model.clone(),
        }];
        for (text, d) in [
            (&self.reasoning, Delta::Reasoning as fn(String) -> Delta),
            (&self.text, Delta::Text),
            (&self.refusal, Delta::Refusal),
        ] {
            if !text.is_empty() {
                out.push(d(text.clone()));
            }
        }
        for (i, c) in self.tool_calls.iter().enumerate() {
            let index = i as u32;
            out.push(Delta::ToolStart {
                index,
                id: c.id.clone(),
                name: c.name.clone(),
            });
            out.push(Delta::ToolArgs {
                index,
                fragment: c.arguments.clone(),
            });
        }
        out.extend(self.finish.map(Delta::Finish));
        out.extend(self.usage.map(Delta::Usage));
        out.push(Delta::Done);
        out
    }
}

/// One piece of a streamed answer, in neither API's format.
#[derive(Clone, Debug, PartialEq)]
pub enum Delta {
    /// The answer begins: its id and model.
    Start {
        /// The upstream's id.
        id: String,
        /// The model, as the upstream names it.
        model: String,
    },
    /// Text.
    Text(String),
    /// Reasoning text.
    Reasoning(String),
    /// Refusal text.
    Refusal(String),
    /// Tool call `index` begins.
    ToolStart {
        /// Its place among the answer's tool calls.
        index: u32,
        /// The id its result must answer.
        id: String,
        /// The tool.
        name: String,
    },
    /// More of tool call `index`'s arguments.
    ToolArgs {
        /// Its place among the answer's tool calls.
        index: u32,
        /// The next piece of JSON.
        fragment: String,
    },
    /// A content block fusebox does not read began (thinking, a server
    /// tool's call or result): passed on as sent, it still takes its
    /// place among the answer's blocks.
    OtherBlock,
    /// Usage so far (Anthropic sends input first and output at the end;
    /// OpenAI all of it at the end).
    Usage(Usage),
    /// Why it stopped.
    Finish(Finish),
    /// The stream's terminator (`[DONE]`, `message_stop`).
    Done,
}

impl Delta {
    /// Whether this piece is content a client waits for (text, reasoning,
    /// a refusal or a tool call): the first such piece is the stream's
    /// first byte.
    pub fn is_content(&self) -> bool {
        matches!(
            self,
            Delta::Text(_) | Delta::Reasoning(_) | Delta::Refusal(_) | Delta::ToolStart { .. } | Delta::ToolArgs { .. }
        )
    }
}

/// Builds a [`Reply`] from streamed pieces.
#[derive(Debug, Default)]
pub struct Assembler {
    reply: Reply,
    /// Output characters so far (text, reasoning, tool names and arguments).
    chars: usize,
    /// Whether the terminator arrived.
    pub done: bool,
    /// The most bytes of text (and of reasoning, of refusal) kept, where
    /// the text went on elsewhere as it came; the rest is counted only.
    keep: Option<usize>,
}

/// Adds `t` to a streamed answer's text `into`, making room for a short
/// answer at its first piece (not growing it piece by piece).
pub(crate) fn push_text(into: &mut String, t: &str) {
    if into.capacity() == 0 {
        into.reserve(t.len().max(512));
    }
    into.push_str(t);
}

/// Most tool calls one answer may make (a bound on what a stream can make us hold).
const MAX_CALLS: u32 = 1024;

impl Assembler {
    /// An assembler of a stream passed on as it comes, keeping at most
    /// `bytes` of its text (and of its reasoning, of its refusal).
    pub fn keeping(bytes: usize) -> Self {
        Self {
            keep: Some(bytes),
            ..Self::default()
        }
    }

    /// Takes one piece.
    pub fn take(&mut self, d: &Delta) {
        let keep = self.keep;
        let kept = |into: &mut String, t: &str| {
            if keep.is_none_or(|k| into.len() + t.len() <= k) {
                push_text(into, t);
            }
        };
        let r = &mut self.reply;
        match d {
            Delta::Start { id, model } => {
                if r.id.is_empty() {
                    r.id.clone_from(id);
                }
                if r.model.is_empty() {
                    r.model.clone_from(model);
                }
            }
            Delta::Text(t) => {
                self.chars += t.len();
                kept(&mut r.text, t);
            }
            Delta::Reasoning(t) => {
                self.chars += t.len();
                kept(&mut r.reasoning, t);
            }
            Delta::Refusal(t) => {
                self.chars += t.len();
                kept(&mut r.refusal, t);
            }
            Delta::ToolStart { index, id, name } if *index < MAX_CALLS => {
                self.chars += name.len();
                // Some servers repeat the id and name in every chunk of a
                // call: the first ones stand.
                let c = Self::call(&mut r.tool_calls, *index);
                if c.id.is_empty() {
                    c.id.clone_from(id);
                }
                if c.name.is_empty() {
                    c.name.clone_from(name);
                }
            }
            Delta::ToolArgs { index, fragment } if *index < MAX_CALLS => {
                self.chars += fragment.len();
                Self::call(&mut r.tool_calls, *index).arguments.push_str(fragment);
            }
            Delta::ToolStart { .. } | Delta::ToolArgs { .. } | Delta::OtherBlock => {}
            Delta::Usage(u) => r.usage.get_or_insert_default().merge(u),
            Delta::Finish(f) => r.finish = Some(*f),
            Delta::Done => self.done = true,
        }
    }

    fn call(calls: &mut Vec<ToolCall>, index: u32) -> &mut ToolCall {
        let i = index as usize;
        while calls.len() <= i {
            calls.push(ToolCall::default());
        }
        &mut calls[i]
    }

    /// Whether the answer is whole: its terminator arrived, or its finish
    /// did (a stream whose body then ends cleanly without the terminator
    /// has said everything).
    pub fn finished(&self) -> bool {
        self.done || self.reply.finish.is_some()
    }

    /// The answer so far.
    pub fn reply(&self) -> &Reply {
        &self.reply
    }

    /// Output characters so far.
    pub fn chars(&self) -> usize {
        self.chars
    }

    /// The answer.
    pub fn finish(self) -> Reply {
        let mut r = self.reply;
        // An argument-less call streams no arguments at all.
        for c in &mut r.tool_calls {
            if c.arguments.is_empty() {
                c.arguments.push_str("{}");
            }
        }
        r.tool_calls.retain(|c| !c.name.is_empty());
        r
    }
}
