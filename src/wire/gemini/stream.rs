//! `streamGenerateContent?alt=sse` chunks, read. Each event is a whole
//! `GenerateContentResponse` with the new parts only; a call arrives whole
//! in one part; usage is cumulative; the chunk with a `finishReason` is the
//! last (the stream has no terminator of its own, so it ends there).

use super::reply::{call_of, finish_of, usage_of, Status};
use crate::wire::openai::StreamError;
use crate::wire::reply::{Delta, Finish};
use serde_json::Value;
use smallvec::SmallVec;

/// Reads chunks into deltas, remembering the answer's id and its calls.
#[derive(Debug, Default)]
pub struct ChunkReader {
    started: bool,
    id: String,
    tools: u32,
}

impl ChunkReader {
    /// Reads one event's data; an `error` chunk is `Err`, its type the
    /// in-band kind fusebox's stream errors are classified by.
    pub fn read(&mut self, data: &str) -> Result<SmallVec<[Delta; 2]>, StreamError> {
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return Err(StreamError::malformed(data));
        };
        if let Some(s) = Status::read(&v) {
            return Err(StreamError {
                kind: s.error_type().into(),
                message: s.said(),
            });
        }
        let mut out = SmallVec::new();
        if !self.started {
            self.started = true;
            let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            self.id = s("responseId");
            out.push(Delta::Start {
                id: self.id.clone(),
                model: s("modelVersion"),
            });
        }
        let candidate = v.pointer("/candidates/0");
        let parts = candidate
            .and_then(|c| c.pointer("/content/parts"))
            .and_then(Value::as_array);
        for part in parts.into_iter().flatten() {
            if let Some(call) = call_of(part, &self.id, self.tools) {
                let index = self.tools;
                self.tools += 1;
                out.push(Delta::ToolStart {
                    index,
                    id: call.id,
                    name: call.name,
                });
                out.push(Delta::ToolArgs {
                    index,
                    fragment: call.arguments,
                });
            } else if let Some(t) = part.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                out.push(match part.get("thought").and_then(Value::as_bool) {
                    Some(true) => Delta::Reasoning(t.to_string()),
                    _ => Delta::Text(t.to_string()),
                });
            }
        }
        if let Some(u) = v.get("usageMetadata") {
            out.push(Delta::Usage(usage_of(u)));
        }
        let reason = candidate.and_then(|c| c.get("finishReason")).and_then(Value::as_str);
        let finish = match (reason, v.pointer("/promptFeedback/blockReason")) {
            (Some(r), _) => Some(finish_of(r, self.tools > 0)),
            (None, Some(_)) => Some(Finish::Filtered),
            (None, None) => None,
        };
        if let Some(f) = finish {
            out.push(Delta::Finish(f));
            out.push(Delta::Done);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text comes as deltas, a call whole, and the last chunk finishes the
    /// answer with its usage; an error chunk is an in-band error.
    #[test]
    fn chunks_are_read_into_deltas_and_the_last_ends_the_answer() {
        let mut r = ChunkReader::default();
        let first = r
            .read(r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Hel"}]}}],"responseId":"r1","modelVersion":"gemini-2.5-flash"}"#)
            .unwrap();
        assert_eq!(
            first.as_slice(),
            [
                Delta::Start {
                    id: "r1".into(),
                    model: "gemini-2.5-flash".into()
                },
                Delta::Text("Hel".into())
            ]
        );
        let last = r
            .read(r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"f","args":{"a":1}}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":6}}"#)
            .unwrap();
        assert!(matches!(&last[0], Delta::ToolStart { index: 0, name, .. } if name == "f"));
        assert!(matches!(&last[1], Delta::ToolArgs { fragment, .. } if fragment == r#"{"a":1}"#));
        assert_eq!(last[3], Delta::Finish(Finish::ToolCalls));
        assert_eq!(last[4], Delta::Done);
        let e = r
            .read(r#"{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}"#)
            .unwrap_err();
        assert_eq!(e.kind, "overloaded_error");
    }
}
