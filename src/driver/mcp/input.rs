//! What the driver answers an MCP server that asks the user for input mid-call (elicitation: a
//! form of a few plain fields, or a page to visit), in either revision: a 2026-07-28 server
//! answers `input_required` and the SDK retries the call with the answers; an older one sends
//! `elicitation/create`. The person at the terminal answers field by field; when no one can (the
//! input has ended, or none was given), the question is refused with an error that says so, and
//! the model reads it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, Implementation,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ClientHandler, ErrorData as McpError, RoleClient};
use serde_json::{Map, Value};

use crate::driver::terminal::{printable, Conversation, Terminal};

/// The start of the error a question no one can answer gets; the tool's observation says so.
pub const NO_ONE_TO_ANSWER: &str = "no one could answer the server's question";

/// The driver's side of a session: questions go to the terminal, and a changed tool list is
/// noted for the next refresh.
pub struct Asker {
    terminal: Option<Arc<Terminal>>,
    /// The server said its tools changed.
    pub changed: Arc<AtomicBool>,
    /// The calls of this server's tools in progress: a question is taken only while one is.
    pub calls: Arc<Calls>,
}

/// How many calls of a server's tools are in progress.
pub struct Calls(watch::Sender<usize>);

/// A call in progress, until dropped.
pub struct Running<'a>(&'a Calls);

impl Calls {
    pub fn begin(&self) -> Running<'_> {
        self.0.send_modify(|n| *n += 1);
        Running(self)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0 .0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Asker {
    pub fn new(terminal: Option<Arc<Terminal>>) -> Self {
        Self {
            terminal,
            changed: Arc::new(AtomicBool::new(false)),
            calls: Arc::new(Calls(watch::Sender::new(0))),
        }
    }

    /// A question is answered only while a call of this server's is in progress, and given up
    /// when that call ends (it timed out, the loop moved on): one asked outside a call, or one
    /// that outlived its call, must not take the terminal's next lines, which belong to others.
    async fn answer(&self, request: ElicitRequestParams) -> Result<ElicitResult, McpError> {
        let mut running = self.calls.0.subscribe();
        if *running.borrow() == 0 {
            let refused = "the server asked the user a question outside any call: refused";
            return Err(McpError::invalid_request(refused, None));
        }
        tokio::select! {
            answered = self.ask(request) => answered,
            _ = running.wait_for(|n| *n == 0) => {
                Err(McpError::internal_error("the call that asked has ended", None))
            }
        }
    }

    async fn ask(&self, request: ElicitRequestParams) -> Result<ElicitResult, McpError> {
        let unanswered = |message: &str| {
            McpError::internal_error(format!("{NO_ONE_TO_ANSWER}: {message}"), None)
        };
        let Some(terminal) = &self.terminal else {
            return Err(unanswered(message_of(&request)));
        };
        let mut input = terminal.conversation().await;
        let answered = match &request {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } => {
                let schema = serde_json::to_value(requested_schema).unwrap_or(Value::Null);
                form(&mut input, message, &schema).await
            }
            ElicitRequestParams::UrlElicitationParams { message, url, .. } => {
                visit(&mut input, message, url).await
            }
            _ => None,
        };
        answered.ok_or_else(|| unanswered(message_of(&request)))
    }
}

fn message_of(request: &ElicitRequestParams) -> &str {
    match request {
        ElicitRequestParams::FormElicitationParams { message, .. }
        | ElicitRequestParams::UrlElicitationParams { message, .. } => message,
        _ => "a question of a kind this client does not read",
    }
}

impl ClientHandler for Asker {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        self.answer(request).await
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.store(true, Ordering::SeqCst);
    }

    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(ElicitationCapability::new());
        ClientConfig::new(
            capabilities,
            Implementation::new("reactstep", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// Asks whether to answer, then each field; `None` once the input has ended.
async fn form(input: &mut Conversation<'_>, message: &str, schema: &Value) -> Option<ElicitResult> {
    eprintln!("The MCP server asks: {}", printable(message));
    loop {
        eprint!("[a]nswer, [d]ecline or [c]ancel: ");
        match input.line().await?.trim().to_lowercase().as_str() {
            "a" | "answer" | "y" | "yes" => break,
            "d" | "decline" | "n" | "no" => {
                return Some(ElicitResult::new(ElicitationAction::Decline))
            }
            "c" | "cancel" => return Some(ElicitResult::new(ElicitationAction::Cancel)),
            _ => eprintln!("Answer a, d or c."),
        }
    }
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut content = Map::new();
    for (name, field) in schema["properties"].as_object().into_iter().flatten() {
        let needed = required.contains(&name.as_str());
        if let Some(value) = ask_field(input, name, field, needed).await? {
            content.insert(name.clone(), value);
        }
    }
    Some(ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(content)))
}

/// One field, asked until the answer reads as its type; `Some(None)` for an optional field left
/// empty, `None` once the input has ended.
async fn ask_field(
    input: &mut Conversation<'_>,
    name: &str,
    field: &Value,
    needed: bool,
) -> Option<Option<Value>> {
    let kind = field["type"].as_str().unwrap_or("string");
    let about = field["description"]
        .as_str()
        .or(field["title"].as_str())
        .unwrap_or_default();
    let choices = field["enum"].as_array();
    loop {
        let shown: Vec<String> = choices
            .into_iter()
            .flatten()
            .map(Value::to_string)
            .collect();
        let choices_said = if shown.is_empty() {
            String::new()
        } else {
            format!(", one of {}", shown.join(" "))
        };
        let optional = if needed { "" } else { ", optional" };
        let asked = format!("{name} ({kind}{choices_said}{optional}) {about}: ");
        eprint!("{}", printable(&asked));
        let line = input.line().await?;
        let line = line.trim();
        if line.is_empty() && !needed {
            return Some(None);
        }
        match typed(kind, line) {
            Some(value) if choices.is_none_or(|c| c.contains(&value)) => return Some(Some(value)),
            _ => eprintln!(
                "{}",
                printable(&format!("That is not a {kind}{choices_said}."))
            ),
        }
    }
}

/// A typed line as the JSON value of its field's type.
fn typed(kind: &str, line: &str) -> Option<Value> {
    match kind {
        "boolean" => match line.to_lowercase().as_str() {
            "y" | "yes" | "true" => Some(Value::Bool(true)),
            "n" | "no" | "false" => Some(Value::Bool(false)),
            _ => None,
        },
        "integer" => line.parse::<i64>().ok().map(Value::from),
        "number" => line
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number),
        _ => Some(Value::String(line.to_string())),
    }
}

/// A page the person is to visit: shown, and answered once they say they are done.
async fn visit(input: &mut Conversation<'_>, message: &str, url: &str) -> Option<ElicitResult> {
    eprintln!(
        "The MCP server asks: {}\nOpen {}",
        printable(message),
        printable(url)
    );
    eprint!("Press Enter when done, or type d to decline: ");
    let line = input.line().await?;
    let action = if line.trim().eq_ignore_ascii_case("d") {
        ElicitationAction::Decline
    } else {
        ElicitationAction::Accept
    };
    Some(ElicitResult::new(action))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    async fn answered(typed: &str, schema: Value) -> Option<ElicitResult> {
        let terminal = Terminal::reading(std::io::Cursor::new(typed.to_string()));
        let mut input = terminal.conversation().await;
        form(&mut input, "Go on?", &schema).await
    }

    fn schema() -> Value {
        json!({"type": "object", "required": ["ok"], "properties": {
            "ok": {"type": "boolean"},
            "n": {"type": "integer"},
            "colour": {"type": "string", "enum": ["red", "blue"]},
        }})
    }

    #[tokio::test]
    async fn each_field_is_asked_until_it_reads_as_its_type() {
        // Properties are asked in the schema's order: ok, n, colour.
        let result = answered("a\nmaybe\nyes\nmany\n\ngreen\nblue\n", schema())
            .await
            .unwrap_or_else(|| panic!("answered"));
        assert_eq!(result.action, ElicitationAction::Accept);
        assert_eq!(result.content, Some(json!({"ok": true, "colour": "blue"})));
    }

    #[tokio::test]
    async fn decline_cancel_and_an_ended_input() {
        let declined = answered("d\n", schema()).await.map(|r| r.action);
        assert_eq!(declined, Some(ElicitationAction::Decline));
        let cancelled = answered("huh\nc\n", schema()).await.map(|r| r.action);
        assert_eq!(cancelled, Some(ElicitationAction::Cancel));
        assert!(
            answered("a\nred\n", schema()).await.is_none(),
            "ended mid-form"
        );
        assert!(answered("", schema()).await.is_none());
    }

    #[tokio::test]
    async fn a_question_outside_a_call_is_refused_and_one_that_outlives_its_call_given_up() {
        let request = || -> ElicitRequestParams {
            serde_json::from_value(json!({
                "mode": "form", "message": "Really?", "requestedSchema": schema(),
            }))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        // A terminal no one types on: only the call's end can free it.
        let (input, _typing) = std::io::pipe().unwrap_or_else(|e| panic!("{e}"));
        let asker = Asker::new(Some(Arc::new(Terminal::reading(std::io::BufReader::new(
            input,
        )))));
        let refused = asker
            .answer(request())
            .await
            .err()
            .map(|e| e.message.to_string());
        assert!(refused.is_some_and(|m| m.contains("outside any call")));
        let running = asker.calls.begin();
        let asked = asker.answer(request());
        let ended = async move { drop(running) };
        let (answered, ()) = tokio::join!(asked, ended);
        let given_up = answered.err().map(|e| e.message.to_string());
        assert_eq!(given_up.as_deref(), Some("the call that asked has ended"));
    }

    #[tokio::test]
    async fn no_terminal_is_an_error_that_says_no_one_could_answer() {
        let asker = Asker::new(None);
        let _running = asker.calls.begin();
        let request: ElicitRequestParams = serde_json::from_value(json!({
            "mode": "form", "message": "Really?", "requestedSchema": schema(),
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let refused = asker
            .answer(request)
            .await
            .err()
            .map(|e| e.message.to_string());
        assert_eq!(
            refused.as_deref(),
            Some("no one could answer the server's question: Really?")
        );
    }
}
