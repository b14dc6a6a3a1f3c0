//! Reading the request body: bounded by the configured limit before any of it is parsed, and
//! decoded with the path of the first failing field so that a 400 can name it.

use std::sync::Arc;
use std::time::Duration;

use actix_web::error::PayloadError;
use actix_web::{web, HttpRequest};
use futures_util::StreamExt;
use serde::de::DeserializeOwned;

use super::error::ErrorKind;
use super::response::FieldError;
use super::unknown_fields::{Noting, Unknown};
use crate::runtime::memory_budget::{Held, MemoryBudget};

/// A body sent as anything but JSON is refused; one sent without a type is read as JSON.
pub fn check_content_type(req: &HttpRequest) -> Result<(), ErrorKind> {
    let Some(value) = req.headers().get(actix_web::http::header::CONTENT_TYPE) else {
        return Ok(());
    };
    let media = value
        .to_str()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if media == "application/json" || media.ends_with("+json") {
        return Ok(());
    }
    // The type sent is not repeated: a header can hold anything, a pasted key included.
    let message = "the body must be JSON (Content-Type: application/json)".to_string();
    Err(ErrorKind::InvalidRequest {
        message: message.clone(),
        fields: vec![FieldError {
            field: "Content-Type".into(),
            message,
        }],
    })
}

/// Collects the body, refusing it as soon as it is known to exceed `limit` bytes, or when it has
/// not arrived whole within the client timeout. The deadline is set once, here: a client that
/// trickles a byte at a time cannot push it back. Its bytes are held against `memory` as they
/// arrive: past the budget, 503 `overloaded`.
pub async fn read(
    req: &HttpRequest,
    payload: web::Payload,
    limit: u64,
    timeout: Duration,
    memory: &Arc<MemoryBudget>,
) -> Result<(web::Bytes, Held), ErrorKind> {
    tokio::time::timeout(timeout, collect(req, payload, limit, memory))
        .await
        .unwrap_or(Err(ErrorKind::RequestTimeout {
            what: "body",
            seconds: timeout.as_secs(),
        }))
}

async fn collect(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: u64,
    memory: &Arc<MemoryBudget>,
) -> Result<(web::Bytes, Held), ErrorKind> {
    let declared = req
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(ErrorKind::PayloadTooLarge { limit });
    }
    // Room for all it announced, whose pages are taken only as bytes arrive: it is the bytes
    // received that are held, so announcing 8 MiB and sending a byte holds a byte.
    let room = declared.unwrap_or(0).min(limit) as usize;
    let mut held = memory.hold(0).map_err(|_| ErrorKind::Overloaded)?;
    let mut body = web::BytesMut::with_capacity(room);
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(unreadable)?;
        if (body.len() + chunk.len()) as u64 > limit {
            return Err(ErrorKind::PayloadTooLarge { limit });
        }
        held.grow_to(body.len() + chunk.len())
            .map_err(|_| ErrorKind::Overloaded)?;
        body.extend_from_slice(&chunk);
    }
    Ok((body.freeze(), held))
}

/// A body the HTTP layer could not read: cut short, or its chunked encoding broken (actix says
/// only "payload reached EOF before completing: None" for a bad chunk size).
fn unreadable(e: PayloadError) -> ErrorKind {
    let message = match e {
        PayloadError::Incomplete(_) | PayloadError::EncodingCorrupted => {
            "the request body could not be read: it ended before its announced length, or its \
             chunked encoding is malformed (a bad chunk size)"
                .to_string()
        }
        other => format!("the request body could not be read: {other}"),
    };
    ErrorKind::InvalidRequest {
        message,
        fields: Vec::new(),
    }
}

/// Decodes JSON into `T`, with the top-level fields `T` does not name; on failure, the message
/// and the field it concerns.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<(T, Unknown), (String, Vec<FieldError>)> {
    decode_knowing(body, &[])
}

/// As [`decode`], with `also_known` top-level fields not noted as unknown: an endpoint reads
/// them apart.
pub fn decode_knowing<T: DeserializeOwned>(
    body: &[u8],
    also_known: &'static [&'static str],
) -> Result<(T, Unknown), (String, Vec<FieldError>)> {
    // Tracking the path of every value costs as much as decoding it; it is wanted only to say
    // where a bad body went wrong, so a good body is decoded without it.
    // A body checked as UTF-8 in one pass is read as text: serde_json then checks no string
    // again, where from bytes it checks each one (a body of code is hundreds of strings).
    let mut unknown = Unknown::knowing(also_known);
    let text = std::str::from_utf8(body);
    let good = match text {
        Ok(text) => noting(serde_json::Deserializer::from_str(text), &mut unknown),
        Err(_) => noting(serde_json::Deserializer::from_slice(body), &mut unknown),
    };
    if let Some(value) = good {
        // From bytes, serde_json checks the strings it keeps and skips the rest unread.
        if let Err(e) = text {
            return Err(refused_body(format!(
                "the body is not UTF-8: an invalid byte at offset {}",
                e.valid_up_to()
            )));
        }
        return Ok((value, unknown));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let result: Result<T, _> = serde_path_to_error::deserialize(&mut deserializer);
    let err = match result {
        Ok(value) => {
            return match deserializer.end() {
                Ok(()) => Ok((value, unknown)),
                Err(e) => Err(refused_body(format!("the body is not valid JSON: {e}"))),
            }
        }
        Err(err) => err,
    };
    let inner = err.inner();
    if inner.is_syntax() || inner.is_eof() {
        // serde_json says "expected value", a syntax error, for a number or a list where one of
        // a field's names goes (`"tool_mode": 1`): when the body is JSON, the field is named.
        let misread = inner.to_string().starts_with("expected value");
        if !misread || serde_json::from_slice::<serde::de::IgnoredAny>(body).is_err() {
            return Err(refused_body(format!("the body is not valid JSON: {inner}")));
        }
        let field = shown_path(err.path());
        let message = "not a value this field takes: it takes one of its names, as a string";
        return Err((
            format!("{field}: {message}"),
            vec![FieldError {
                field,
                message: message.into(),
            }],
        ));
    }
    let mut field = shown_path(err.path());
    let text = inner.to_string();
    // serde reports a missing field at its parent; name the field itself.
    if let Some(missing) = text
        .strip_prefix("missing field `")
        .and_then(|r| r.split('`').next())
    {
        field = if field == "." {
            missing.to_string()
        } else {
            format!("{field}.{missing}")
        };
    }
    if field == "." {
        field = "body".into();
    }
    // serde quotes the value it refused (`invalid type: string "…"`, `unknown variant \`…\``),
    // which may be a key pasted into the wrong field: the message keeps the field, the kind of
    // value and what was expected, never the value.
    let message = crate::scrub::serde_message(&strip_position(&text));
    Err((
        format!("{field}: {message}"),
        vec![FieldError { field, message }],
    ))
}

/// The whole input decoded as `T` (nothing but whitespace after it), its unknown fields noted.
fn noting<'de, R: serde_json::de::Read<'de>, T: serde::Deserialize<'de>>(
    mut deserializer: serde_json::Deserializer<R>,
    unknown: &mut Unknown,
) -> Option<T> {
    let value = T::deserialize(Noting {
        inner: &mut deserializer,
        unknown,
    })
    .ok()?;
    deserializer.end().ok().map(|()| value)
}

/// A refusal of the body as a whole.
fn refused_body(message: String) -> (String, Vec<FieldError>) {
    let field = FieldError {
        field: "body".into(),
        message: message.clone(),
    };
    (message, vec![field])
}

/// The longest name of a field shown in a path: the rest of a long name is cut.
const SHOWN_NAME_CHARS: usize = 64;

/// `path` as serde_path_to_error writes it (`a.b[2].c`, `.` when empty), each name the client
/// wrote (an unknown field's, a map's key) without anything shaped like a key and cut to
/// [`SHOWN_NAME_CHARS`] characters: a key pasted as a field's name would otherwise come back in
/// the message, whole, and go into the log line of the refusal.
fn shown_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut shown = String::new();
    for segment in path {
        if !matches!(segment, Segment::Seq { .. }) && !shown.is_empty() {
            shown.push('.');
        }
        match segment {
            Segment::Seq { index } => shown.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                // Scrubbed whole, then cut: a cut through a key leaves pieces too short to find.
                let name = crate::llm::redact_key_shapes(key);
                shown.extend(name.chars().take(SHOWN_NAME_CHARS));
            }
            Segment::Unknown => shown.push('?'),
        }
    }
    if shown.is_empty() {
        shown.push('.');
    }
    shown
}

/// serde_json appends " at line L column C"; the field path says more to a client.
fn strip_position(text: &str) -> String {
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_string(),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[expect(dead_code, reason = "only decoding is under test")]
    struct Outer {
        inner: Inner,
    }

    #[derive(Debug, Deserialize)]
    #[expect(dead_code, reason = "only decoding is under test")]
    struct Inner {
        #[serde(rename = "tokenLimit")]
        token_limit: u32,
    }

    /// Both ways in: what the body's bytes decode to, as serde_json reads them from bytes.
    fn same_as_from_slice(body: &[u8]) {
        let ours = decode::<serde_json::Value>(body)
            .ok()
            .map(|(value, _)| value);
        let theirs = serde_json::from_slice::<serde_json::Value>(body).ok();
        assert_eq!(ours, theirs, "{:?}", String::from_utf8_lossy(body));
    }

    #[test]
    fn text_and_bytes_decode_alike_at_the_edges() {
        for body in [
            &br#"{"a":"\ud800"}"#[..],
            br#"{"a":"\ud83d\ude00 \u0000"}"#,
            b"{\"a\":\"\xff\"}",
            b"{\"a\":\"\xc3\"}",
            "{\"a\":\"é😀\"}".as_bytes(),
            b"{\"a\":\"tab\there\"}",
            b"{\"a\":1e400}",
            b"{\"a\":18446744073709551616}",
            b"\xef\xbb\xbf{}",
            &[b'['; 200],
        ] {
            same_as_from_slice(body);
        }
    }

    proptest::proptest! {
        #[test]
        fn any_body_decodes_as_from_bytes(
            body in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::sample::select(br#"{}[]":,\u0123456789abcdef-.eE ntrl"#.to_vec()),
                    proptest::num::u8::ANY,
                ],
                0..40,
            )
        ) {
            same_as_from_slice(&body);
        }

        #[test]
        fn any_text_decodes_as_from_bytes(text in proptest::prelude::any::<String>(), n in 0u64..u64::MAX) {
            let body = serde_json::to_vec(&serde_json::json!({"a": text, "b": [n, -1.5, null]}));
            same_as_from_slice(&body.unwrap_or_default());
        }
    }

    #[test]
    fn a_wrong_type_names_its_path() {
        let Err((_, fields)) = decode::<Outer>(br#"{"inner":{"tokenLimit":"many"}}"#) else {
            panic!("must fail")
        };
        assert_eq!(fields[0].field, "inner.tokenLimit");
        assert!(
            fields[0].message.contains("invalid type"),
            "{}",
            fields[0].message
        );
    }

    #[test]
    fn a_refused_value_is_not_repeated() {
        let Err((message, fields)) =
            decode::<Outer>(br#"{"inner":{"tokenLimit":"sk-proj-Qz7Xv3Lm9Wd2"}}"#)
        else {
            panic!("must fail")
        };
        assert_eq!(
            message,
            "inner.tokenLimit: invalid type: string, expected u32"
        );
        assert!(!fields[0].message.contains("Qz7X"));
    }

    /// A name the client wrote, deep in the body, is shown without a key and cut: an unknown
    /// field named with the key itself would otherwise come back whole.
    #[test]
    fn a_key_used_as_a_fields_name_is_not_shown() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Inner {
            #[serde(rename = "modelName")]
            _model: Option<String>,
        }
        #[derive(Debug, serde::Deserialize)]
        struct Outer {
            _list: Vec<Inner>,
        }
        let key = "sk-proj-Zq7Xw3Kp9Lm2Nb8Vc4Rt6Yh1Ju5Ik0Ol";
        let long = "n".repeat(2_000);
        for name in [key, long.as_str()] {
            let body = format!(r#"{{"_list":[{{"modelName":"m"}},{{"{name}":1}}]}}"#);
            let Err((message, fields)) = decode::<Outer>(body.as_bytes()) else {
                panic!("an unknown field is refused");
            };
            assert!(
                !message.contains(key) && !fields[0].field.contains(key),
                "{message}"
            );
            assert!(message.len() < 300, "{message}");
            assert!(fields[0].field.starts_with("_list[1]."), "{fields:?}");
        }
    }

    #[test]
    fn a_missing_field_names_the_field_itself() {
        let Err((_, fields)) = decode::<Outer>(br#"{"inner":{}}"#) else {
            panic!("must fail")
        };
        assert_eq!(fields[0].field, "inner.tokenLimit");
    }

    #[test]
    fn broken_json_names_the_body() {
        let Err((message, fields)) = decode::<Outer>(b"{\"inner\": ") else {
            panic!("must fail")
        };
        assert_eq!(fields[0].field, "body");
        assert!(message.contains("not valid JSON"));
    }

    #[test]
    fn trailing_garbage_is_refused() {
        assert!(decode::<Outer>(br#"{"inner":{"tokenLimit":1}} x"#).is_err());
    }
}
