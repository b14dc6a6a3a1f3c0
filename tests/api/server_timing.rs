//! The overhead, told (issue 35, item 4): every response says what the service's own phases took
//! in `Server-Timing` and what it added to the model's time in `X-Reactstep-Overhead-Ms`; a
//! stream's terminal event says it whole.

use serde_json::Value;
use wiremock::{Mock, ResponseTemplate};

use crate::support::app::spawn_app;
use crate::support::requests::request;
use crate::support::spec::assert_conforms;
use crate::support::stream::post_stream;
use crate::support::upstream::{openai_reply, OPENAI_PATH};

/// The phases a `Server-Timing` header names, in order, with their durations.
fn phases(header: &str) -> Vec<(String, f64)> {
    header
        .split(", ")
        .map(|part| {
            let (name, dur) = part
                .split_once(";dur=")
                .unwrap_or_else(|| panic!("{header}"));
            (
                name.to_string(),
                dur.parse().unwrap_or_else(|_| panic!("{header}")),
            )
        })
        .collect()
}

fn named(phases: &[(String, f64)], name: &str) -> f64 {
    phases
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, d)| *d)
        .unwrap()
}

/// The model takes 80 ms: the phases must put that in `upstream`, not in the overhead.
async fn slow_model() -> crate::support::app::TestApp {
    let app = spawn_app().await;
    Mock::given(wiremock::matchers::path(OPENAI_PATH))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(openai_reply("Thought: done\nFinal Answer: x"))
                .set_delay(std::time::Duration::from_millis(80)),
        )
        .mount(&app.llm)
        .await;
    app
}

#[tokio::test]
async fn a_step_tells_its_phases_and_its_overhead() {
    let app = slow_model().await;
    let response = app
        .client
        .post(format!("{}/api/agent/react_step", app.address))
        .json(&request("gpt-4o", "q"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    let timing = phases(&header("server-timing"));
    let names: Vec<&str> = timing.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["decode", "fit", "upstream", "parse", "total"]);
    let (upstream, total) = (named(&timing, "upstream"), named(&timing, "total"));
    assert!(upstream >= 80.0, "{timing:?}");
    assert!(total >= upstream + named(&timing, "fit"), "{timing:?}");
    let overhead: f64 = header("x-reactstep-overhead-ms").parse().unwrap();
    assert!(
        (overhead - (total - upstream)).abs() < 0.01,
        "{overhead} vs {timing:?}"
    );
    assert!(
        overhead < upstream,
        "the 80 ms of the model are not overhead: {overhead}"
    );
    let body: Value = response.json().await.unwrap();
    assert_conforms("POST", "/api/agent/react_step", 200, &body);
    assert!(body.get("server_timing").is_none(), "the header says it");
}

#[tokio::test]
async fn every_response_has_the_headers_errors_and_probes_included() {
    let app = spawn_app().await;
    let mut bad = request("gpt-4o", "q");
    bad["llm_config"]["tokenLimit"] = serde_json::json!(0);
    for (path, body) in [
        ("/api/agent/react_step", Some(bad)),
        ("/healthz", None),
        ("/no/such/path", None),
    ] {
        let url = format!("{}{path}", app.address);
        let response = match &body {
            Some(body) => app.client.post(url).json(body).send().await.unwrap(),
            None => app.client.get(url).send().await.unwrap(),
        };
        let timing = response
            .headers()
            .get("server-timing")
            .unwrap()
            .to_str()
            .unwrap();
        assert_eq!(
            phases(timing).last().map(|(n, _)| n.as_str()),
            Some("total"),
            "{path}"
        );
        assert_eq!(
            named(&phases(timing), "upstream"),
            0.0,
            "{path}: no model was called"
        );
        assert!(
            response.headers().contains_key("x-reactstep-overhead-ms"),
            "{path}"
        );
    }
}

#[tokio::test]
async fn a_stream_tells_the_whole_in_its_terminal_event() {
    let app = slow_model().await;
    let sse =
        crate::support::stream_upstream::openai_stream(&["Thought: done\nFinal Answer: x"], "stop");
    app.llm.reset().await;
    Mock::given(wiremock::matchers::path(OPENAI_PATH))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(sse, "text/event-stream")
                .set_delay(std::time::Duration::from_millis(80)),
        )
        .mount(&app.llm)
        .await;
    let streamed = post_stream(&app, &request("gpt-4o", "q")).await;
    let (name, event) = streamed.terminal();
    assert_eq!(name, "step", "{event}");
    let timing = &event["server_timing"];
    let ms = |field: &str| timing[field].as_f64().unwrap_or_else(|| panic!("{timing}"));
    assert!(ms("upstream_ms") >= 80.0, "{timing}");
    assert!(ms("total_ms") >= ms("upstream_ms"), "{timing}");
    assert!((ms("overhead_ms") - (ms("total_ms") - ms("upstream_ms"))).abs() < 1e-6);
    assert!(ms("decode_ms") > 0.0 && ms("fit_ms") > 0.0, "{timing}");
    let header = |name: &str| streamed.headers[name].to_str().unwrap().to_string();
    let told = phases(&header("server-timing"));
    assert!(named(&told, "upstream") >= 80.0, "{told:?}");
}

/// A stream's headers leave once the model's reply has begun, while it is still answering:
/// its wait until then is `upstream`, not the service's overhead (the running wait was not
/// counted: `upstream;dur=0.000`, and the whole wait told as overhead).
#[tokio::test]
async fn a_streams_headers_count_the_models_wait_so_far_as_upstream() {
    let first = crate::support::stream_upstream::openai_stream(&["Thought: thinking"], "stop");
    let cut = first.windows(2).position(|w| w == b"\n\n").unwrap() + 2;
    let upstream = crate::support::stream_upstream::serve(
        200,
        vec![first[..cut].to_vec()],
        crate::support::stream_upstream::Ending::Stall,
    )
    .await;
    let uri = upstream.uri.clone();
    let app =
        crate::support::app::spawn_app_with(move |c| c.openai_base_url = format!("{uri}/v1")).await;
    let response = reqwest::Client::new()
        .post(format!("{}/api/agent/react_step/stream", app.address))
        .json(&request("gpt-4o", "q"))
        .send()
        .await
        .unwrap();
    let header = |name: &str| response.headers()[name].to_str().unwrap().to_string();
    let told = phases(&header("server-timing"));
    let overhead: f64 = header("x-reactstep-overhead-ms").parse().unwrap();
    assert!(named(&told, "upstream") > 0.0, "{told:?}");
    assert!(overhead < named(&told, "total"), "{overhead} {told:?}");
    assert!(
        (overhead - (named(&told, "total") - named(&told, "upstream"))).abs() < 0.01,
        "{overhead} {told:?}"
    );
}
