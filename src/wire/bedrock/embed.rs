//! OpenAI's `/v1/embeddings` as Bedrock's InvokeModel bodies for the two
//! families of embedding models it serves: Amazon Titan (one text a call,
//! `dimensions` taken) and Cohere (up to 96 texts a call, its dimensions
//! fixed by the model).

use crate::wire::openai::{embed_dimensions, embed_texts};
use crate::wire::RawBody;
use serde_json::{json, Value};

/// The texts a Cohere call embeds at most.
const COHERE_TEXTS: usize = 96;

/// The texts one request may have Titan embed, a call each: past it one
/// client request would fan out into that many signed upstream calls.
const TITAN_TEXTS: usize = 256;

/// A family of Bedrock embedding models, each with its own body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmbedModel {
    /// `amazon.titan-embed-*`.
    Titan,
    /// `cohere.embed-*`.
    Cohere,
}

impl EmbedModel {
    /// The family of the model `id` (a model id, with a region prefix or
    /// as an ARN); `None` for a model that does not embed.
    pub fn of(id: &str) -> Option<Self> {
        if id.contains("titan-embed") {
            Some(Self::Titan)
        } else if id.contains("cohere.embed") {
            Some(Self::Cohere)
        } else {
            None
        }
    }

    /// The InvokeModel bodies that embed what the client's `body` asks, in
    /// its order: one per text for Titan, one for Cohere; `Err` says what
    /// the model cannot do.
    pub fn render(self, body: &RawBody) -> Result<Vec<Vec<u8>>, String> {
        let texts = embed_texts(body).ok_or("cannot honour token ids as input (Bedrock's models embed text)")?;
        let dims = embed_dimensions(body);
        match self {
            Self::Titan if texts.len() > TITAN_TEXTS => Err(format!(
                "cannot embed {} texts in one request (Titan takes one a call; at most {TITAN_TEXTS})",
                texts.len()
            )),
            Self::Titan => Ok(texts
                .iter()
                .map(|t| {
                    let mut b = json!({ "inputText": t });
                    if let Some(d) = dims {
                        b["dimensions"] = json!(d);
                    }
                    b.to_string().into_bytes()
                })
                .collect()),
            Self::Cohere if dims.is_some() => {
                Err("cannot honour dimensions (Cohere's models embed at a size of their own)".into())
            }
            Self::Cohere if texts.len() > COHERE_TEXTS => Err(format!(
                "cannot embed {} texts in one call (Cohere takes at most {COHERE_TEXTS})",
                texts.len()
            )),
            Self::Cohere => Ok(vec![json!({"texts": texts, "input_type": "search_document"})
                .to_string()
                .into_bytes()]),
        }
    }

    /// The vectors of one answer `v`, and the tokens it counted where it
    /// says.
    pub fn read(self, v: Value) -> Result<(Vec<Vec<Value>>, Option<u32>), String> {
        let vector = |e: Value| match e {
            Value::Array(values) => Ok(values),
            _ => Err("an embedding that is no list of numbers".to_string()),
        };
        match self {
            Self::Titan => {
                let tokens = v["inputTextTokenCount"].as_u64().map(|n| n as u32);
                let e = field(v, "embedding").ok_or("an answer without an embedding")?;
                Ok((vec![vector(e)?], tokens))
            }
            Self::Cohere => match field(v, "embeddings") {
                Some(Value::Array(all)) => Ok((all.into_iter().map(vector).collect::<Result<_, _>>()?, None)),
                _ => Err("an answer without embeddings".into()),
            },
        }
    }
}

/// `v`'s member `key`, taken out.
fn field(v: Value, key: &str) -> Option<Value> {
    match v {
        Value::Object(mut o) => o.remove(key),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titan_takes_a_text_a_call_and_cohere_all_at_once() {
        assert_eq!(EmbedModel::of("amazon.titan-embed-text-v2:0"), Some(EmbedModel::Titan));
        assert_eq!(EmbedModel::of("us.cohere.embed-english-v3"), Some(EmbedModel::Cohere));
        assert_eq!(EmbedModel::of("anthropic.claude-3-5-haiku-20241022-v1:0"), None);
        let body = RawBody::parse(br#"{"model":"e","input":["a","b"],"dimensions":256}"#).unwrap();
        let calls = EmbedModel::Titan.render(&body).unwrap();
        let calls: Vec<Value> = calls.iter().map(|c| serde_json::from_slice(c).unwrap()).collect();
        assert_eq!(
            calls,
            [
                json!({"inputText": "a", "dimensions": 256}),
                json!({"inputText": "b", "dimensions": 256})
            ]
        );
        assert!(EmbedModel::Cohere.render(&body).is_err(), "Cohere's size is its own");
        let many = format!(
            r#"{{"model":"e","input":{}}}"#,
            serde_json::to_string(&vec!["a"; 257]).unwrap()
        );
        let why = EmbedModel::Titan
            .render(&RawBody::parse(many.as_bytes()).unwrap())
            .unwrap_err();
        assert!(why.contains("257 texts") && why.contains("at most 256"), "{why}");
        let plain = RawBody::parse(br#"{"model":"e","input":["a","b"]}"#).unwrap();
        let call: Value = serde_json::from_slice(&EmbedModel::Cohere.render(&plain).unwrap()[0]).unwrap();
        assert_eq!(call, json!({"texts": ["a", "b"], "input_type": "search_document"}));
        let (v, tokens) = EmbedModel::Titan
            .read(json!({"embedding": [0.5, 1.0], "inputTextTokenCount": 3}))
            .unwrap();
        assert_eq!((v, tokens), (vec![vec![json!(0.5), json!(1.0)]], Some(3)));
        let (v, tokens) = EmbedModel::Cohere
            .read(json!({"embeddings": [[0.5], [1.0]], "id": "x", "response_type": "embeddings_floats"}))
            .unwrap();
        assert_eq!((v.len(), tokens), (2, None));
        assert!(EmbedModel::Titan.read(json!({"message": "x"})).is_err());
    }
}
