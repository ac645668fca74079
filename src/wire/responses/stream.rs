//! The Responses API's semantic stream events, written from pieces.

use super::reply::{call_item, message_item, object, status_of, Head};
use super::{Echo, Ids};
use crate::wire::message::ToolCall;
use crate::wire::reply::{Delta, Reply, Usage};
use serde_json::{json, Value};

/// Writes pieces as the Responses API's semantic stream events.
#[derive(Debug)]
pub struct ResponsesEventWriter {
    ids: Ids,
    echo: Echo,
    model: String,
    created: u64,
    seq: u64,
    started: bool,
    /// The answer so far (its tool calls, and why it ended).
    reply: Reply,
    /// Output items written so far (done ones as they ended).
    items: Vec<Value>,
    /// The message being written: its output index, number and text.
    message: Option<(usize, usize, String)>,
    /// Messages begun so far (each has its own id).
    messages: usize,
    /// Tool calls not done yet: the stream's index of each, its output
    /// index and its place in `reply.tool_calls`. A call stays open until
    /// text follows or the answer ends, so arguments of calls streamed
    /// side by side each reach their own call.
    calls: Vec<(u32, usize, usize)>,
    /// The stream's index of every call begun.
    begun: Vec<u32>,
    usage: Usage,
}

impl ResponsesEventWriter {
    /// A writer of the response `ids` (echoing `echo`) for `model`.
    pub fn new(ids: Ids, echo: Echo, model: impl Into<String>, created: u64) -> Self {
        Self {
            ids,
            echo,
            model: model.into(),
            created,
            seq: 0,
            started: false,
            reply: Reply::default(),
            items: Vec::new(),
            message: None,
            messages: 0,
            calls: Vec::new(),
            begun: Vec::new(),
            usage: Usage::default(),
        }
    }

    fn event(&mut self, name: &str, mut data: Value, out: &mut Vec<u8>) {
        data["type"] = json!(name);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        crate::wire::anthropic::event(name, &data, out);
    }

    fn snapshot(&self, status: &str) -> Value {
        let u = (status != "in_progress").then_some(self.usage);
        let head = Head {
            ids: &self.ids,
            echo: &self.echo,
            model: &self.model,
            created: self.created,
        };
        object(&head, status, self.items.clone(), u)
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let r = self.snapshot("in_progress");
        self.event("response.created", json!({"response": r}), out);
        self.event("response.in_progress", json!({"response": r}), out);
    }

    fn close_message(&mut self, out: &mut Vec<u8>) {
        let Some((at, m, text)) = self.message.take() else {
            return;
        };
        let id = self.ids.message(m);
        self.event(
            "response.output_text.done",
            json!({"item_id": id, "output_index": at, "content_index": 0, "text": text, "logprobs": []}),
            out,
        );
        let part = json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
        self.event(
            "response.content_part.done",
            json!({"item_id": id, "output_index": at, "content_index": 0, "part": part}),
            out,
        );
        self.items[at] = message_item(&id, &text, "completed");
        let item = self.items[at].clone();
        self.event(
            "response.output_item.done",
            json!({"output_index": at, "item": item}),
            out,
        );
    }

    fn close_calls(&mut self, out: &mut Vec<u8>) {
        for (_, at, c) in std::mem::take(&mut self.calls) {
            let id = self.ids.call(c);
            let call = self.reply.tool_calls[c].clone();
            self.event(
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": at, "arguments": call.arguments}),
                out,
            );
            self.items[at] = call_item(&id, &call, "completed");
            let item = self.items[at].clone();
            self.event(
                "response.output_item.done",
                json!({"output_index": at, "item": item}),
                out,
            );
        }
    }

    fn text(&mut self, t: &str, out: &mut Vec<u8>) {
        if self.message.is_none() {
            self.close_calls(out);
            let (at, m) = (self.items.len(), self.messages);
            self.messages += 1;
            let id = self.ids.message(m);
            let item = message_item(&id, "", "in_progress");
            self.items.push(item.clone());
            self.event(
                "response.output_item.added",
                json!({"output_index": at, "item": item}),
                out,
            );
            let part = json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
            self.event(
                "response.content_part.added",
                json!({"item_id": id, "output_index": at, "content_index": 0, "part": part}),
                out,
            );
            self.message = Some((at, m, String::new()));
        }
        let Some((at, m, text)) = self.message.as_mut() else {
            return;
        };
        text.push_str(t);
        let (at, id) = (*at, self.ids.message(*m));
        self.event(
            "response.output_text.delta",
            json!({"item_id": id, "output_index": at, "content_index": 0, "delta": t, "logprobs": []}),
            out,
        );
    }

    fn call_start(&mut self, index: u32, id: &str, name: &str, out: &mut Vec<u8>) {
        // A call's start said again (some servers repeat it in every
        // chunk) starts no second call.
        if self.begun.contains(&index) {
            return;
        }
        self.begun.push(index);
        self.close_message(out);
        let c = self.reply.tool_calls.len();
        let call = ToolCall::new(id, name, "");
        self.reply.tool_calls.push(call.clone());
        let at = self.items.len();
        let item = call_item(&self.ids.call(c), &call, "in_progress");
        self.items.push(item.clone());
        self.event(
            "response.output_item.added",
            json!({"output_index": at, "item": item}),
            out,
        );
        self.calls.push((index, at, c));
    }

    fn call_args(&mut self, index: u32, fragment: &str, out: &mut Vec<u8>) {
        let Some(&(_, at, c)) = self.calls.iter().find(|(i, ..)| *i == index) else {
            return;
        };
        self.reply.tool_calls[c].arguments.push_str(fragment);
        self.event(
            "response.function_call_arguments.delta",
            json!({"item_id": self.ids.call(c), "output_index": at, "delta": fragment}),
            out,
        );
    }

    /// Writes `d` to `out`.
    pub fn write(&mut self, d: &Delta, out: &mut Vec<u8>) {
        match d {
            Delta::Usage(u) => {
                self.usage.merge(u);
                return;
            }
            Delta::Start { model, .. } if !model.is_empty() && !self.started => self.model.clone_from(model),
            _ => {}
        }
        self.start(out);
        match d {
            Delta::Start { .. } | Delta::Usage(_) | Delta::Reasoning(_) | Delta::OtherBlock => {}
            Delta::Text(t) | Delta::Refusal(t) => self.text(t, out),
            Delta::ToolStart { index, id, name } => self.call_start(*index, id, name, out),
            Delta::ToolArgs { index, fragment } => self.call_args(*index, fragment, out),
            Delta::Finish(f) => self.reply.finish = Some(*f),
            Delta::Done => {
                self.close_message(out);
                self.close_calls(out);
                let status = status_of(&self.reply);
                let r = self.snapshot(status);
                let name = if status == "incomplete" {
                    "response.incomplete"
                } else {
                    "response.completed"
                };
                self.event(name, json!({"response": r}), out);
            }
        }
    }

    /// Ends a stream cut short: an `error` event, then `response.failed`.
    pub fn fail(&mut self, code: &str, message: &str, out: &mut Vec<u8>) {
        self.start(out);
        self.event("error", json!({"code": code, "message": message, "param": null}), out);
        let mut r = self.snapshot("failed");
        r["error"] = json!({"code": code, "message": message});
        self.event("response.failed", json!({"response": r}), out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::sse::data_of as events;

    #[test]
    fn each_item_has_its_own_id_text_and_arguments() {
        let mut w = ResponsesEventWriter::new(Ids::new(7), Echo::default(), "gpt-4o", 0);
        let start = |index, id: &str| Delta::ToolStart {
            index,
            id: id.into(),
            name: "get_order".into(),
        };
        let args = |index, fragment: &str| Delta::ToolArgs {
            index,
            fragment: fragment.into(),
        };
        let mut out = Vec::new();
        for d in [
            Delta::Text("Looking.".into()),
            start(0, "call_a"),
            start(1, "call_b"),
            start(1, "call_b"),
            args(1, r#"{"order_id":"2"}"#),
            args(0, r#"{"order_id":"1"}"#),
            Delta::Text("Both found.".into()),
            Delta::Done,
        ] {
            w.write(&d, &mut out);
        }
        let evs = events(&out);
        let done = evs.last().unwrap();
        assert_eq!(done["type"], "response.completed");
        let output = done["response"]["output"].as_array().unwrap();
        let summary: Vec<(&str, &str, String)> = output
            .iter()
            .map(|i| {
                let what = match i["type"].as_str().unwrap() {
                    "message" => i["content"][0]["text"].as_str().unwrap().to_string(),
                    _ => format!(
                        "{} {}",
                        i["call_id"].as_str().unwrap(),
                        i["arguments"].as_str().unwrap()
                    ),
                };
                (i["type"].as_str().unwrap(), i["id"].as_str().unwrap(), what)
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("message", "msg_000000000000000700", "Looking.".to_string()),
                (
                    "function_call",
                    "fc_000000000000000700",
                    r#"call_a {"order_id":"1"}"#.to_string()
                ),
                (
                    "function_call",
                    "fc_000000000000000701",
                    r#"call_b {"order_id":"2"}"#.to_string()
                ),
                ("message", "msg_000000000000000701", "Both found.".to_string()),
            ]
        );
        // The deltas name the item they belong to.
        let deltas: Vec<(u64, &str)> = evs
            .iter()
            .filter(|e| e["type"] == "response.function_call_arguments.delta")
            .map(|e| (e["output_index"].as_u64().unwrap(), e["item_id"].as_str().unwrap()))
            .collect();
        assert_eq!(deltas, [(2, "fc_000000000000000701"), (1, "fc_000000000000000700")]);
        let seq: Vec<u64> = evs.iter().map(|e| e["sequence_number"].as_u64().unwrap()).collect();
        assert!(seq.windows(2).all(|w| w[1] == w[0] + 1));
    }
}
