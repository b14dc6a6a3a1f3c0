//! The error of a provider's own code (building its request, decoding its reply and its stream's
//! events), which knows neither which provider it serves nor whose key was used: the transport
//! makes it an [`LlmError`](super::LlmError) that names both (`error.rs`).

/// What a provider's request building or decoding found wrong, before the transport names the
/// provider and scrubs the key.
#[derive(Debug)]
pub enum WireError {
    /// The reply or an event is not the shape the provider documents.
    Shape(String),
    /// The provider reported an error inside a stream that had started with 200: its raw data.
    InStream(String),
    /// The key cannot be sent in a header (it is checked as printable ASCII, so this is rare).
    KeyNotHeader,
}

impl WireError {
    /// A body or event that did not decode as `what`.
    pub fn json(what: &str, err: &serde_json::Error) -> Self {
        // Without the value serde would quote: a reply can hold anything, the key included.
        Self::Shape(format!(
            "{what} is not the documented JSON ({})",
            crate::scrub::json_error(err)
        ))
    }
}
