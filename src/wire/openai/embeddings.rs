//! OpenAI's `/v1/embeddings` answer written from vectors another provider
//! made: its list, each vector as floats or (`encoding_format: "base64"`,
//! the OpenAI SDK's default) as little-endian `f32` bytes in base64.

use crate::wire::RawBody;
use base64::Engine;
use serde_json::{json, Value};

/// The texts the client's `body` asks to embed (`input` a string or a list
/// of them); `None` for token ids, which only OpenAI's own models read.
pub fn embed_texts(body: &RawBody) -> Option<Vec<String>> {
    match body.read::<Value>("input").and_then(Result::ok)? {
        Value::String(s) => Some(vec![s]),
        Value::Array(items) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Some(s),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// The `dimensions` the client's `body` asks for.
pub fn embed_dimensions(body: &RawBody) -> Option<u32> {
    body.read::<u32>("dimensions").and_then(Result::ok)
}

/// OpenAI's embeddings list of `vectors` (JSON numbers), named `model`,
/// the prompt `tokens` counted, each vector as the client's `body` asked.
pub fn embeddings_list<'a>(
    vectors: impl IntoIterator<Item = &'a [Value]>,
    body: &RawBody,
    model: &str,
    tokens: u32,
) -> Vec<u8> {
    let base64 = body.read::<String>("encoding_format").and_then(Result::ok).as_deref() == Some("base64");
    let data: Vec<Value> = vectors
        .into_iter()
        .enumerate()
        .map(|(i, values)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = values
                    .iter()
                    .flat_map(|x| (x.as_f64().unwrap_or(0.0) as f32).to_le_bytes())
                    .collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                Value::Array(values.to_vec())
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    json!({"object": "list", "data": data, "model": model,
           "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})
    .to_string()
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_dimensions_and_both_encodings() {
        let body =
            RawBody::parse(br#"{"model":"e","input":["a","b"],"dimensions":2,"encoding_format":"base64"}"#).unwrap();
        assert_eq!(embed_texts(&body).unwrap(), ["a", "b"]);
        assert_eq!(embed_dimensions(&body), Some(2));
        let v = [json!(1.0), json!(-2.0)];
        let out: Value = serde_json::from_slice(&embeddings_list([&v[..]], &body, "e", 3)).unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(out["data"][0]["embedding"].as_str().unwrap())
            .unwrap();
        assert_eq!(bytes, [1.0f32.to_le_bytes(), (-2.0f32).to_le_bytes()].concat());
        assert_eq!(out["usage"]["total_tokens"], 3);
        let floats = RawBody::parse(br#"{"model":"e","input":"a"}"#).unwrap();
        let out: Value = serde_json::from_slice(&embeddings_list([&v[..]], &floats, "e", 3)).unwrap();
        assert_eq!(out["data"][0]["embedding"], json!([1.0, -2.0]));
        let tokens = RawBody::parse(br#"{"model":"e","input":[[1,2,3]]}"#).unwrap();
        assert!(embed_texts(&tokens).is_none());
    }
}
