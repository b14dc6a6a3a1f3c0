//! Which of a provider's wire formats a call speaks.

/// `llm_config.api`: which of a provider's wire formats a call speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WireApi {
    /// Chat Completions (or the provider's only API: Anthropic Messages, Ollama's chat).
    #[default]
    Chat,
    /// OpenAI's Responses API, used statelessly.
    Responses,
}

impl WireApi {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Responses => "responses",
        }
    }
}
