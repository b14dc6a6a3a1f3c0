//! A tool that lives in an MCP server: a call is forwarded through the session (the SDK answers
//! a 2026-07-28 server's `input_required` rounds through [`super::input::Asker`]), and what the
//! server gives back becomes the observation: structured output as its JSON, text as it is.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::service::{RunningService, ServiceError};
use rmcp::RoleClient;
use serde_json::{Map, Value};

use super::endpoint::redacted;
use super::input::{Asker, NO_ONE_TO_ANSWER};
use super::process::Ended;
use crate::driver::registry::{Tool, ToolOutcome};

pub type Session = RunningService<RoleClient, Asker>;

pub struct McpTool {
    pub session: Arc<Session>,
    pub server: String,
    /// The tool's name in its server, which may differ from the registry's.
    pub name: String,
    pub patience: Duration,
    /// What of the endpoint must never reach the model (its token, headers' values …): a server
    /// that echoes what it was sent has it taken out.
    pub secrets: Arc<[String]>,
    /// For a server started here: whether, and how, it ended.
    pub ended: Option<Ended>,
}

impl Tool for McpTool {
    fn call<'a>(&'a self, args: &'a Map<String, Value>) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            let request =
                CallToolRequestParams::new(self.name.clone()).with_arguments(args.clone());
            // The server may ask the user a question while this call runs, and only then.
            let _running = self.session.service().calls.begin();
            let call = tokio::time::timeout(self.patience, self.session.call_tool(request));
            let mut call = std::pin::pin!(call);
            // A server that dies in the call, a helper of it still holding its output open,
            // would be waited on to the end of the patience. An answer it wrote before it
            // ended is still in the pipe, and is read in a moment.
            let outcome = tokio::select! {
                biased;
                answered = &mut call => self.answered(answered),
                how = ended(self.ended.clone()) => {
                    match tokio::time::timeout(READ_AFTER_THE_END, &mut call).await {
                        Ok(answered) => self.answered(answered),
                        Err(_) => ToolOutcome::Failed(format!(
                            "the MCP server {} ended while running {} ({how})",
                            self.server, self.name
                        )),
                    }
                }
            };
            self.without_secrets(outcome)
        })
    }
}

/// How the server ended, once it has; never for one not started here.
async fn ended(ended: Option<Ended>) -> String {
    if let Some(mut ended) = ended {
        if let Ok(how) = ended.wait_for(Option::is_some).await {
            return how.clone().unwrap_or_default();
        }
    }
    std::future::pending().await
}

/// How long an answer a server wrote before it ended is waited for.
const READ_AFTER_THE_END: Duration = Duration::from_millis(500);

impl McpTool {
    fn answered(
        &self,
        answered: Result<Result<CallToolResult, ServiceError>, tokio::time::error::Elapsed>,
    ) -> ToolOutcome {
        match answered {
            Ok(Ok(result)) => observation(result),
            Ok(Err(e)) => ToolOutcome::Failed(self.failure(&e)),
            Err(_) => ToolOutcome::Failed(format!(
                "the MCP server {} did not answer {} within {} s (timed out)",
                self.server,
                self.name,
                self.patience.as_secs_f64()
            )),
        }
    }

    fn without_secrets(&self, outcome: ToolOutcome) -> ToolOutcome {
        if self.secrets.is_empty() {
            return outcome;
        }
        match outcome {
            ToolOutcome::Done(text) => ToolOutcome::Done(redacted(&text, &self.secrets)),
            ToolOutcome::Failed(why) => ToolOutcome::Failed(redacted(&why, &self.secrets)),
            submitted => submitted,
        }
    }

    /// The failure as the model and the report read it: in words, never the SDK's type names.
    fn failure(&self, error: &ServiceError) -> String {
        let why = match error {
            ServiceError::McpError(e) if e.message.starts_with(NO_ONE_TO_ANSWER) => {
                return format!(
                    "{} asked for the user's input, and {}",
                    self.name, e.message
                );
            }
            ServiceError::McpError(e) => format!("it answered with an error: {}", e.message),
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                "the connection to it is closed (the server may have stopped)".to_string()
            }
            ServiceError::Timeout { .. } => "it did not answer in time".to_string(),
            ServiceError::InputRequiredRoundsExceeded { max_rounds } => {
                format!("it asked for input again and again, past {max_rounds} rounds")
            }
            ServiceError::Cancelled { .. } => "the call was cancelled".to_string(),
            ServiceError::UnexpectedResponse => {
                "it answered with something else than a tool's result".to_string()
            }
            other => other.to_string(),
        };
        format!(
            "the MCP server {} failed to run {}: {why}",
            self.server, self.name
        )
    }
}

/// What the model reads of a result: its text blocks (a line for each other block), and its
/// structured output as JSON where that says more (see [`readable`]); `isError` makes it a
/// failure.
fn observation(result: CallToolResult) -> ToolOutcome {
    let parts: Vec<String> = match &result.structured_content {
        None => result.content.iter().map(described).collect(),
        Some(structured) => {
            let (texts, others): (Vec<&ContentBlock>, Vec<&ContentBlock>) = result
                .content
                .iter()
                .partition(|block| matches!(block, ContentBlock::Text(_)));
            let text: Vec<String> = texts.into_iter().map(described).collect();
            let mut parts = readable(&text.join("\n"), structured);
            parts.extend(others.into_iter().map(described));
            parts
        }
    };
    let text = parts.join("\n");
    if result.is_error == Some(true) {
        ToolOutcome::Failed(if text.is_empty() {
            "the tool failed and said nothing more".into()
        } else {
            text
        })
    } else {
        ToolOutcome::Done(text)
    }
}

/// What the model reads of a result's text and structured output: the output as JSON, except
/// where its text says the same in plainer form:
/// - the text is one of the output's string fields whole (a file's content, say): the text alone,
///   which reads as it is where JSON would escape every line;
/// - there is no text, or the text is JSON (the copy a server sends older clients): the output's
///   JSON in place of the text;
/// - else the text, then the output's JSON on a line of its own.
fn readable(text: &str, structured: &Value) -> Vec<String> {
    let a_field = structured
        .as_object()
        .is_some_and(|o| o.values().any(|v| v.as_str() == Some(text)));
    if a_field && !text.is_empty() {
        vec![text.to_string()]
    } else if text.is_empty() || serde_json::from_str::<Value>(text).is_ok() {
        vec![structured.to_string()]
    } else {
        vec![text.to_string(), structured.to_string()]
    }
}

fn described(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Image(image) => format!("[an image, {}]", image.mime_type),
        ContentBlock::Audio(audio) => format!("[audio, {}]", audio.mime_type),
        ContentBlock::Resource(resource) => match serde_json::to_value(&resource.resource) {
            Ok(value) => value["text"]
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| format!("[a resource: {}]", value["uri"])),
            Err(_) => "[a resource]".into(),
        },
        ContentBlock::ResourceLink(link) => format!("[a resource at {}]", link.uri),
        _ => "[content of a kind this client does not read]".into(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_result_is_its_text_and_is_error_makes_it_a_failure() {
        let result: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "a"}, {"type": "image", "data": "AA==", "mimeType": "image/png"}],
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            observation(result),
            ToolOutcome::Done("a\n[an image, image/png]".into())
        );
        let failed: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "Access denied"}], "isError": true,
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            observation(failed),
            ToolOutcome::Failed("Access denied".into())
        );
        let structured: CallToolResult =
            serde_json::from_value(json!({"content": [], "structuredContent": {"n": 1}}))
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            observation(structured),
            ToolOutcome::Done(r#"{"n":1}"#.into())
        );
    }

    #[test]
    fn structured_output_is_read_as_its_json_not_its_text_copy() {
        let result: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "{\"sum\": 5}"}],
            "structuredContent": {"sum": 5},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            observation(result),
            ToolOutcome::Done(r#"{"sum":5}"#.into())
        );
        let file: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "a\nb\n"}],
            "structuredContent": {"content": "a\nb\n"},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(observation(file), ToolOutcome::Done("a\nb\n".into()));
        let both: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "Sum is five"},
                        {"type": "image", "data": "AA==", "mimeType": "image/png"}],
            "structuredContent": {"sum": 5},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            observation(both),
            ToolOutcome::Done("Sum is five\n{\"sum\":5}\n[an image, image/png]".into())
        );
    }
}
