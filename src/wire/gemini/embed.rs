//! OpenAI's `/v1/embeddings` as Google's: `batchEmbedContents` (the Gemini
//! API, and Vertex AI's Gemini embedding models) or Vertex AI's `predict`
//! (its `text-embedding-*` models), the client's `dimensions` as
//! `outputDimensionality`; the vectors back in OpenAI's list.

use crate::wire::openai::{embed_dimensions, embed_texts, embeddings_list};
use crate::wire::RawBody;
use serde_json::{json, Value};

const TOKEN_IDS: &str = "cannot honour token ids as input (Google's models embed text)";

/// The `batchEmbedContents` body for the client's `body`, each request
/// naming `model` where the API wants it (the Gemini API's `models/…`;
/// Vertex AI names it in the URL only); `Err` says what cannot be embedded.
pub fn render_embed(body: &RawBody, model: Option<&str>) -> Result<Vec<u8>, String> {
    let texts = embed_texts(body).ok_or(TOKEN_IDS)?;
    let dims = embed_dimensions(body);
    let name = model.map(|m| match m.contains('/') {
        true => m.to_string(),
        false => format!("models/{m}"),
    });
    let requests: Vec<Value> = texts
        .iter()
        .map(|t| {
            let mut r = json!({"content": {"parts": [{"text": t}]}});
            if let Some(n) = &name {
                r["model"] = json!(n);
            }
            if let Some(d) = dims {
                r["outputDimensionality"] = json!(d);
            }
            r
        })
        .collect();
    Ok(json!({ "requests": requests }).to_string().into_bytes())
}

/// Vertex AI's `predict` body for the client's `body`: an instance per
/// text.
pub fn render_predict(body: &RawBody) -> Result<Vec<u8>, String> {
    let texts = embed_texts(body).ok_or(TOKEN_IDS)?;
    let instances: Vec<Value> = texts.iter().map(|t| json!({ "content": t })).collect();
    let mut out = json!({ "instances": instances });
    if let Some(d) = embed_dimensions(body) {
        out["parameters"] = json!({ "outputDimensionality": d });
    }
    Ok(out.to_string().into_bytes())
}

/// OpenAI's embeddings list for Google's answer `v` (`embeddings[].values`,
/// or `predict`'s `predictions[].embeddings.values`), named `model`, each
/// vector as the client's `body` asked; with the prompt tokens Google
/// counted, else `estimate`.
pub fn embeddings_reply(v: &Value, body: &RawBody, model: &str, estimate: u32) -> Result<(Vec<u8>, u32), String> {
    let (items, inner) = match (v.get("embeddings"), v.get("predictions")) {
        (Some(Value::Array(e)), _) => (e, None),
        (_, Some(Value::Array(p))) => (p, Some("embeddings")),
        _ => return Err("an answer without embeddings".into()),
    };
    let mut vectors = Vec::with_capacity(items.len());
    let mut counted = 0.0;
    for item in items {
        let e = inner.map_or(item, |k| &item[k]);
        let values = e["values"].as_array().ok_or("an embedding without values")?;
        vectors.push(values.as_slice());
        counted += e["statistics"]["token_count"].as_f64().unwrap_or(0.0);
    }
    let counted = match v["usageMetadata"]["promptTokenCount"].as_u64() {
        Some(n) => n as u32,
        None => counted as u32,
    };
    let tokens = if counted > 0 { counted } else { estimate };
    Ok((embeddings_list(vectors, body, model, tokens), tokens))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_become_requests_and_vectors_come_back() {
        let body = RawBody::parse(br#"{"model":"e","input":["a","b"],"dimensions":2}"#).unwrap();
        let req: Value = serde_json::from_slice(&render_embed(&body, Some("gemini-embedding-001")).unwrap()).unwrap();
        assert_eq!(req["requests"][1]["content"]["parts"][0]["text"], "b");
        assert_eq!(req["requests"][0]["model"], "models/gemini-embedding-001");
        assert_eq!(req["requests"][0]["outputDimensionality"], 2);
        let vertex: Value = serde_json::from_slice(&render_embed(&body, None).unwrap()).unwrap();
        assert!(vertex["requests"][0].get("model").is_none());
        let answer = json!({"embeddings": [{"values": [1.0, -2.0]}, {"values": [0.5, 0.25]}]});
        let (out, tokens) = embeddings_reply(&answer, &body, "e", 3).unwrap();
        let out: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(out["data"][1]["embedding"], json!([0.5, 0.25]));
        assert_eq!((tokens, out["usage"]["total_tokens"].clone()), (3, json!(3)));
        let tokens = RawBody::parse(br#"{"model":"e","input":[[1,2,3]]}"#).unwrap();
        assert!(render_embed(&tokens, None).is_err());
    }

    #[test]
    fn predict_has_an_instance_per_text_and_counts_its_tokens() {
        let body = RawBody::parse(br#"{"model":"e","input":["a","b"],"dimensions":2}"#).unwrap();
        let req: Value = serde_json::from_slice(&render_predict(&body).unwrap()).unwrap();
        assert_eq!(
            req,
            json!({"instances": [{"content": "a"}, {"content": "b"}], "parameters": {"outputDimensionality": 2}})
        );
        let answer = json!({"predictions": [
            {"embeddings": {"values": [1.0], "statistics": {"token_count": 4.0, "truncated": false}}},
            {"embeddings": {"values": [2.0], "statistics": {"token_count": 5.0, "truncated": false}}}]});
        let (out, tokens) = embeddings_reply(&answer, &body, "e", 1).unwrap();
        let out: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!((tokens, out["data"][1]["embedding"].clone()), (9, json!([2.0])));
    }
}
