//! Issue 14's yardstick for the live parser: every corpus case streamed by the upstream in
//! small pieces (1 to 9 bytes, never inside a character) must end in the same decision as the
//! whole-output parser gave, with a streamed thought that holds no part of the action and that
//! the final thought contains, and `answer` deltas only for what ends up in `direct_response` (all of it, or none when
//! the answer had no tag and is held back for the `step` event, as the README says).

use std::sync::Arc;

use reactstep::llm::sse::SseDecoder;
use serde_json::Value;
use wiremock::ResponseTemplate;

use crate::support::app::spawn_app;
use crate::support::corpus::{
    for_each_case, load, mount_pair, repair_round, run_plain, Case, Got, REPAIR_REPLY,
};
use crate::support::stream::STREAM_PATH;
use crate::support::stream_upstream::openai_stream;

/// Markup of a tool call that never belongs in a streamed thought.
const CALL_MARKUP: [&str; 14] = [
    "<tool_call>",
    "</tool_call>",
    "<function=",
    "<parameter=",
    "[TOOL_CALLS]",
    "[ARGS]",
    "<|python_tag|>",
    "<｜tool▁",
    "<|tool_call",
    "<|tool_calls_section",
    "<|channel|>",
    "<|message|>",
    "<|call|>",
    "<|constrain|>",
];

/// `text` cut into pieces of `size` bytes, each widened to end on a character boundary.
fn pieces(text: &str, size: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = size.min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        out.push(rest[..cut].to_string());
        rest = &rest[cut..];
    }
    out
}

fn sse(text: &str, size: usize, finish: &str) -> ResponseTemplate {
    let deltas = pieces(text, size);
    let deltas: Vec<&str> = deltas.iter().map(String::as_str).collect();
    ResponseTemplate::new(200).set_body_raw(openai_stream(&deltas, finish), "text/event-stream")
}

struct Streamed {
    /// `(event name, data)` in order; a plain JSON reply is one `json` event.
    events: Vec<(String, Value)>,
    repaired: Result<bool, String>,
}

impl Streamed {
    /// The `name` deltas of each attempt: a `retry` event discards what came before it.
    fn attempts(&self, name: &str) -> Vec<String> {
        let mut attempts = vec![String::new()];
        for (n, d) in &self.events {
            if n == "retry" {
                attempts.push(String::new());
            } else if n == name {
                if let Some(last) = attempts.last_mut() {
                    last.push_str(d["delta"].as_str().unwrap_or_default());
                }
            }
        }
        attempts
    }

    /// What a client keeps: the deltas after the last `retry`.
    fn joined(&self, name: &str) -> String {
        self.attempts(name).pop().unwrap_or_default()
    }

    fn retries(&self) -> usize {
        self.events.iter().filter(|(n, _)| n == "retry").count()
    }
}

async fn run_stream(case: &Case, body: &Value, size: usize) -> Result<Streamed, String> {
    let app = spawn_app().await;
    mount_pair(
        &app,
        sse(&case.output, size, case.finish()),
        sse(REPAIR_REPLY, 5, "stop"),
    )
    .await;
    let response = app
        .client
        .post(format!("{}{STREAM_PATH}", app.address))
        .json(body)
        .send()
        .await
        .map_err(|e| format!("the stream request failed: {e}"))?;
    let is_sse = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("text/event-stream"));
    let bytes = response
        .bytes()
        .await
        .map_err(|e| format!("the stream broke: {e}"))?;
    let mut events = Vec::new();
    if is_sse {
        let mut decoder = SseDecoder::default();
        for event in decoder
            .push(&bytes)
            .map_err(|_| "the stream is not text".to_string())?
        {
            let data = serde_json::from_str(&event.data)
                .map_err(|e| format!("an event's data is not JSON: {e}"))?;
            events.push((event.event.unwrap_or_default(), data));
        }
        if !decoder.is_between_events() {
            return Err("the stream ended inside an event".into());
        }
    } else {
        let data = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        events.push(("json".into(), data));
    }
    Ok(Streamed {
        events,
        repaired: repair_round(&app).await,
    })
}

fn collapsed(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The disagreements between the stream and the whole-output reading of one case.
fn disagreements(plain: &Got, plain_decision: &Value, streamed: &Streamed) -> Vec<String> {
    let mut out = Vec::new();
    let terminals: Vec<&(String, Value)> = streamed
        .events
        .iter()
        .filter(|(n, _)| matches!(n.as_str(), "step" | "error" | "json"))
        .collect();
    let [(name, data)] = terminals.as_slice() else {
        return vec![format!("{} terminal events", terminals.len())];
    };
    if !streamed
        .events
        .last()
        .is_some_and(|(last, _)| matches!(last.as_str(), "step" | "error" | "json"))
    {
        out.push("the terminal event is not the last".into());
    }
    // The final decision.
    match name.as_str() {
        "step" => {
            let decision = crate::support::corpus::decision(data);
            if decision != *plain_decision {
                out.push(format!(
                    "step decision {decision} != plain {plain_decision}"
                ));
            }
        }
        _ => {
            let kind = &data["error"]["type"];
            if plain_decision.get("error") != Some(kind) {
                out.push(format!(
                    "stream ended in {name} {kind} != plain {plain_decision}"
                ));
            }
        }
    }
    match (&streamed.repaired, plain) {
        (Ok(true), Got::Repair) | (Ok(false), Got::Action { .. } | Got::Answer { .. }) => {}
        (Ok(false), Got::Error { .. }) => {}
        (repaired, plain) => out.push(format!(
            "stream repair round {repaired:?} but plain got {plain}"
        )),
    }
    // A repair round, and only one, is announced by a `retry` event.
    let repaired = matches!(streamed.repaired, Ok(true));
    if streamed.retries() != usize::from(repaired) {
        out.push(format!(
            "{} retry events for {} repair rounds",
            streamed.retries(),
            usize::from(repaired)
        ));
    }
    // The thought deltas: no action in them, and what the client keeps inside the final thought.
    let thought = streamed.joined("thought");
    let step_thought = data["thought"].as_str().unwrap_or_default();
    if !collapsed(step_thought).contains(&collapsed(&thought)) {
        out.push(format!(
            "streamed thought {thought:?} is not in the final thought {step_thought:?}"
        ));
    }
    let first_attempt = collapsed(&streamed.attempts("thought")[0]);
    for marker in CALL_MARKUP {
        if first_attempt.contains(marker) {
            out.push(format!(
                "streamed thought holds call markup {marker:?}: {thought:?}"
            ));
        }
    }
    // An Action line the client keeps as thought must be one the whole output's thought holds
    // too (a model thinking aloud inside <think>), never the action itself. What came before a
    // `retry` the client has discarded.
    let action_line = |l: &str| {
        let l = l
            .trim_start_matches([' ', '*', '#', '>'])
            .to_ascii_lowercase();
        l.starts_with("action:") || l.starts_with("action input:")
    };
    if thought
        .lines()
        .any(|l| action_line(l) && !step_thought.contains(l.trim()))
    {
        out.push(format!(
            "streamed thought holds an Action line: {thought:?}"
        ));
    }
    if let Some(raw) = data["action_details"]["raw_action_string"].as_str() {
        if raw.len() >= 6 && collapsed(&thought).contains(&collapsed(raw)) {
            out.push(format!(
                "streamed thought holds the action {raw:?}: {thought:?}"
            ));
        }
    }
    // The answer deltas: exactly the direct response, or nothing.
    let answer = streamed.joined("answer");
    match data["direct_response"].as_str() {
        // Text before any tag is held back until the whole output is read (README), so an
        // answer may come only in the step; what is streamed must be exactly the answer.
        Some(direct) if name == "step" => {
            if !answer.is_empty() && answer.trim() != direct.trim() {
                out.push(format!(
                    "streamed answer {answer:?} != direct_response {direct:?}"
                ));
            }
        }
        _ => {
            if !answer.is_empty() {
                out.push(format!(
                    "answer deltas {answer:?} streamed, but the step has no direct response"
                ));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_stream_agrees_with_the_whole_output_parser() {
    let corpus = Arc::new(load());
    let results = for_each_case(&corpus, |corpus, i| async move {
        let case = &corpus.cases[i];
        let body = case.body(&corpus);
        let (plain, decision) = run_plain(case, &body).await;
        let size = i % 9 + 1;
        match run_stream(case, &body, size).await {
            Ok(streamed) => disagreements(&plain, &decision, &streamed),
            Err(why) => vec![why],
        }
    })
    .await;
    let mut report = String::new();
    let mut count = 0;
    for (i, (case, result)) in corpus.cases.iter().zip(results).enumerate() {
        let found = result.unwrap_or_else(|panic| vec![format!("the test panicked: {panic}")]);
        if !found.is_empty() {
            count += 1;
            report.push_str(&format!(
                "  [{}] {} (pieces of {} bytes):\n",
                case.family,
                case.id,
                i % 9 + 1
            ));
            for d in found {
                report.push_str(&format!("      {}\n", d.replace('\n', "\\n")));
            }
        }
    }
    eprintln!(
        "\nstream vs whole output: {count} of {} cases disagree\n{report}",
        corpus.cases.len()
    );
    assert_eq!(count, 0, "the live parser disagrees on {count} cases");
}
