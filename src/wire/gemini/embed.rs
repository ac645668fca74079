//! OpenAI's `/v1/embeddings` as Gemini's `batchEmbedContents`: the
//! client's inputs as one request each, its `dimensions` as
//! `outputDimensionality`; the vectors back in OpenAI's list, as floats or
//! (`encoding_format: "base64"`, the OpenAI SDK's default) as
//! little-endian `f32` bytes in base64.

use crate::wire::RawBody;
use base64::Engine;
use serde_json::{json, Value};

/// The `batchEmbedContents` body for the client's `body`, calling `model`;
/// `Err` says what Gemini cannot embed (token ids).
pub fn render_embed(body: &RawBody, model: &str) -> Result<Vec<u8>, String> {
    let texts: Vec<String> = match body.read::<Value>("input").and_then(Result::ok) {
        Some(Value::String(s)) => vec![s],
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => items
            .into_iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => return Err("cannot honour token ids as input (Gemini embeds text)".into()),
    };
    let dims = body.read::<u32>("dimensions").and_then(Result::ok);
    let name = if model.contains('/') {
        model.to_string()
    } else {
        format!("models/{model}")
    };
    let requests: Vec<Value> = texts
        .iter()
        .map(|t| {
            let mut r = json!({"model": name, "content": {"parts": [{"text": t}]}});
            if let Some(d) = dims {
                r["outputDimensionality"] = json!(d);
            }
            r
        })
        .collect();
    Ok(json!({ "requests": requests }).to_string().into_bytes())
}

/// OpenAI's embeddings list for Gemini's answer `v`, named `model`, the
/// prompt `tokens` counted (Gemini says none), each vector as the client's
/// `body` asked.
pub fn embeddings_reply(v: &Value, body: &RawBody, model: &str, tokens: u32) -> Result<Vec<u8>, String> {
    let base64 = body.read::<String>("encoding_format").and_then(Result::ok).as_deref() == Some("base64");
    let vectors = v
        .get("embeddings")
        .and_then(Value::as_array)
        .ok_or("an answer without embeddings")?;
    let mut data = Vec::with_capacity(vectors.len());
    for (i, e) in vectors.iter().enumerate() {
        let values = e
            .get("values")
            .and_then(Value::as_array)
            .ok_or("an embedding without values")?;
        let embedding = if base64 {
            let bytes: Vec<u8> = values
                .iter()
                .flat_map(|x| (x.as_f64().unwrap_or(0.0) as f32).to_le_bytes())
                .collect();
            json!(base64::engine::general_purpose::STANDARD.encode(bytes))
        } else {
            Value::Array(values.clone())
        };
        data.push(json!({"object": "embedding", "index": i, "embedding": embedding}));
    }
    let out = json!({"object": "list", "data": data, "model": model,
                     "usage": {"prompt_tokens": tokens, "total_tokens": tokens}});
    Ok(out.to_string().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_become_requests_and_vectors_come_back_as_asked() {
        let body =
            RawBody::parse(br#"{"model":"e","input":["a","b"],"dimensions":2,"encoding_format":"base64"}"#).unwrap();
        let req: Value = serde_json::from_slice(&render_embed(&body, "gemini-embedding-001").unwrap()).unwrap();
        assert_eq!(req["requests"][1]["content"]["parts"][0]["text"], "b");
        assert_eq!(req["requests"][0]["model"], "models/gemini-embedding-001");
        assert_eq!(req["requests"][0]["outputDimensionality"], 2);
        let answer = json!({"embeddings": [{"values": [1.0, -2.0]}, {"values": [0.5, 0.25]}]});
        let out: Value = serde_json::from_slice(&embeddings_reply(&answer, &body, "e", 3).unwrap()).unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(out["data"][0]["embedding"].as_str().unwrap())
            .unwrap();
        assert_eq!(bytes, [1.0f32.to_le_bytes(), (-2.0f32).to_le_bytes()].concat());
        assert_eq!(out["usage"]["total_tokens"], 3);
        let tokens = RawBody::parse(br#"{"model":"e","input":[[1,2,3]]}"#).unwrap();
        assert!(render_embed(&tokens, "m").is_err());
    }
}
