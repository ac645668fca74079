//! `streamGenerateContent?alt=sse` chunks, read. Each event is a whole
//! `GenerateContentResponse` with the new parts only; a call arrives whole
//! in one part; usage is cumulative; the chunk with a `finishReason` is the
//! last (the stream has no terminator of its own, so it ends there).

use super::reply::{finish_of, Status};
use crate::wire::openai::StreamError;
use crate::wire::reply::{Delta, Finish, Usage};
use serde_json::value::RawValue;
use smallvec::SmallVec;
use std::borrow::Cow;

/// A chunk, as much of it as is read (the rest is skipped unparsed).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ChunkIn<'a> {
    #[serde(default, borrow)]
    candidates: Vec<CandidateIn<'a>>,
    #[serde(default)]
    usage_metadata: Option<UsageIn>,
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    model_version: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    response_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    prompt_feedback: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct CandidateIn<'a> {
    #[serde(default, borrow)]
    content: Option<ContentIn<'a>>,
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(serde::Deserialize)]
struct ContentIn<'a> {
    #[serde(default, borrow)]
    parts: Vec<PartIn<'a>>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartIn<'a> {
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    text: Option<Cow<'a, str>>,
    #[serde(default)]
    thought: Option<bool>,
    #[serde(default, borrow)]
    function_call: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    thought_signature: Option<Cow<'a, str>>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct UsageIn {
    #[serde(default)]
    prompt_token_count: u64,
    #[serde(default)]
    candidates_token_count: u64,
    #[serde(default)]
    thoughts_token_count: u64,
    #[serde(default)]
    cached_content_token_count: u64,
}

impl UsageIn {
    fn usage(&self) -> Usage {
        let n = |v: u64| v.min(u64::from(u32::MAX)) as u32;
        Usage {
            input: n(self.prompt_token_count),
            output: n(self.candidates_token_count.saturating_add(self.thoughts_token_count)),
            cached_input: n(self.cached_content_token_count),
        }
    }
}

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
        let Ok(chunk) = serde_json::from_str::<ChunkIn>(data) else {
            return Err(StreamError::malformed(data));
        };
        if chunk.error.is_some() {
            let v = serde_json::from_str(data).unwrap_or_default();
            let s = Status::read(&v).unwrap_or_default();
            return Err(StreamError {
                kind: s.error_type().into(),
                message: s.said(),
            });
        }
        let mut out = SmallVec::new();
        if !self.started {
            self.started = true;
            self.id = chunk.response_id.as_deref().unwrap_or("").to_string();
            out.push(Delta::Start {
                id: self.id.clone(),
                model: chunk.model_version.as_deref().unwrap_or("").to_string(),
            });
        }
        let candidate = chunk.candidates.first();
        let parts = candidate
            .and_then(|c| c.content.as_ref())
            .map_or(&[][..], |c| &c.parts[..]);
        for part in parts {
            if let Some(call) = part.function_call {
                let part = serde_json::json!({
                    "functionCall": serde_json::from_str::<serde_json::Value>(call.get()).unwrap_or_default(),
                    "thoughtSignature": part.thought_signature.as_deref(),
                });
                if let Some(call) = super::reply::call_of(&part, &self.id, self.tools) {
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
                }
            } else if let Some(t) = part.text.as_deref().filter(|t| !t.is_empty()) {
                out.push(match part.thought {
                    Some(true) => Delta::Reasoning(t.to_string()),
                    _ => Delta::Text(t.to_string()),
                });
            }
        }
        if let Some(u) = &chunk.usage_metadata {
            out.push(Delta::Usage(u.usage()));
        }
        let reason = candidate.and_then(|c| c.finish_reason.as_deref());
        let finish = match (reason, chunk.prompt_feedback) {
            (Some(r), _) => Some(finish_of(r, self.tools > 0)),
            (None, Some(f)) if f.get().contains("blockReason") => Some(Finish::Filtered),
            _ => None,
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
