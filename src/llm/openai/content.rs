//! What a reply's `content` and a streamed call's `arguments` may be besides a string: Mistral's
//! reasoning models (Magistral, and Small 4 or Medium 3.5 asked to reason) send `content` as a
//! list of chunks, `{"type": "thinking", "thinking": [text chunks]}` and `{"type": "text",
//! "text": …}`; some local servers stream a call's `arguments` as an object, not its JSON text.

use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

/// A message's content: its text, and the reasoning its thinking chunks held.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Content {
    pub text: String,
    pub thinking: String,
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ContentVisitor)
    }
}

/// One chunk of a list: a thinking chunk's own chunks are a [`Content`] whose text is the
/// reasoning. A chunk of another kind (a reference, an image) holds no text of the reply.
#[derive(Deserialize)]
struct ContentChunk {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    thinking: Option<Content>,
}

struct ContentVisitor;

impl<'de> Visitor<'de> for ContentVisitor {
    type Value = Content;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string or a list of content chunks")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Content, E> {
        self.visit_string(text.to_owned())
    }

    fn visit_string<E: serde::de::Error>(self, text: String) -> Result<Content, E> {
        Ok(Content {
            text,
            thinking: String::new(),
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut chunks: A) -> Result<Content, A::Error> {
        let mut content = Content::default();
        while let Some(chunk) = chunks.next_element::<ContentChunk>()? {
            match (chunk.kind.as_str(), chunk.text, chunk.thinking) {
                ("text", Some(text), _) => content.text.push_str(&text),
                ("thinking", _, Some(thinking)) => content.thinking.push_str(&thinking.text),
                _ => {}
            }
        }
        Ok(content)
    }
}

/// A streamed call's arguments as JSON text: a string as it is, an object written out.
pub struct ArgumentsText(pub String);

impl<'de> Deserialize<'de> for ArgumentsText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ArgumentsVisitor)
    }
}

struct ArgumentsVisitor;

impl<'de> Visitor<'de> for ArgumentsVisitor {
    type Value = ArgumentsText;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the arguments' JSON text, or an object")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<ArgumentsText, E> {
        Ok(ArgumentsText(text.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, text: String) -> Result<ArgumentsText, E> {
        Ok(ArgumentsText(text))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ArgumentsText, A::Error> {
        let object =
            serde_json::Map::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
        Ok(ArgumentsText(serde_json::Value::Object(object).to_string()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<ArgumentsText, A::Error> {
        // Not arguments a call can take: read past, so that the call is refused as not an
        // object's, by the step, not the whole reply as undecodable.
        while items.next_element::<IgnoredAny>()?.is_some() {}
        Ok(ArgumentsText("[]".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(json: &str) -> Content {
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"))
    }

    #[test]
    fn a_string_or_chunks_of_thinking_and_text() {
        assert_eq!(content(r#""Thought: go""#).text, "Thought: go");
        let chunks = content(
            r#"[{"type":"thinking","thinking":[{"type":"text","text":"Hm, "},{"type":"text","text":"search."}]},
                {"type":"text","text":"Action: "},{"type":"reference","reference_ids":[1]},{"type":"text","text":"search"}]"#,
        );
        assert_eq!(chunks.thinking, "Hm, search.");
        assert_eq!(chunks.text, "Action: search");
        assert!(serde_json::from_str::<Content>("7").is_err());
        assert!(serde_json::from_str::<Content>(r#"[{"text":"no type"}]"#).is_err());
    }

    #[test]
    fn arguments_as_text_or_an_object() {
        let read = |json: &str| {
            serde_json::from_str::<ArgumentsText>(json)
                .map(|a| a.0)
                .ok()
        };
        assert_eq!(read(r#""{\"a\":1}""#).as_deref(), Some(r#"{"a":1}"#));
        assert_eq!(
            read(r#"{"a":[1,"x"]}"#).as_deref(),
            Some(r#"{"a":[1,"x"]}"#)
        );
        assert_eq!(read("[1]").as_deref(), Some("[]"));
        assert_eq!(read("7"), None);
    }
}
