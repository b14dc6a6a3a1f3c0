//! The provider a model name implies when the request names none: local tags, Hugging Face
//! names and router ids are never taken for a hosted vendor, so the user's key never goes to a
//! vendor they did not name; the names the README lists are inferred as it says.
//!
//! Written by a red team (issue 16): a test that exposes a defect asserts the correct behaviour,
//! so it fails until the defect is fixed; the others show a defence holding against something
//! the other suites do not try.

use serde_json::{json, Value};

use crate::support::app::{spawn_app, try_step, TestApp};
use crate::support::requests::{request, KEY};

/// A step for `model` with a key and no `provider`: where, if anywhere, the key went.
async fn inferred(app: &TestApp, model: &str) -> (u16, Value, Vec<String>) {
    app.llm.reset().await;
    let mut body = request(model, "q");
    body["dry_run"] = json!(false);
    let (status, reply) = try_step(app, &body).await.unwrap();
    let reached: Vec<String> = app
        .llm
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| {
            r.headers
                .values()
                .any(|v| v.to_str().is_ok_and(|v| v.contains(KEY)))
        })
        .map(|r| r.url.path().to_string())
        .collect();
    (status, reply, reached)
}

#[tokio::test]
async fn local_and_hugging_face_model_names_are_not_inferred_as_a_hosted_vendor() {
    // Before the provider layer these names were a 400 ("provider is required"); now each
    // sends the key to a hosted vendor: an Ollama tag (`name:size`) is never a hosted API's
    // model, `deepseek-ai/` is the Hugging Face organisation (Together, Fireworks, vLLM) that
    // matches the `deepseek-` prefix, and `Qwen/…` is the project's own vLLM test model.
    let app = spawn_app().await;
    let mut wrong = Vec::new();
    for model in [
        "deepseek-r1:8b",
        "deepseek-coder-v2:16b",
        "mistral-nemo:12b",
        "mistral-small:24b",
        "deepseek-ai/DeepSeek-V3",
        "Qwen/Qwen2.5-Coder-7B-Instruct",
        "mistralai/Mistral-7B-Instruct-v0.3",
    ] {
        let (status, reply, reached) = inferred(&app, model).await;
        let refused =
            status == 400 && reply["error"]["fields"][0]["field"] == "llm_config.provider";
        if !reached.is_empty() || !refused {
            wrong.push(format!("{model} -> key sent to {reached:?}, HTTP {status}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[tokio::test]
async fn groq_model_ids_without_a_provider_do_not_send_the_groq_key_to_openrouter() {
    // Groq serves these exact ids (the README says no prefix is Groq's alone), and so do other
    // routers; inferring OpenRouter hands a Groq (or Together, …) key to openrouter.ai.
    let app = spawn_app().await;
    let mut wrong = Vec::new();
    for model in [
        "openai/gpt-oss-120b",
        "meta-llama/llama-4-scout-17b-16e-instruct",
        "qwen/qwen3-32b",
        "moonshotai/kimi-k2-instruct",
    ] {
        let (status, _, reached) = inferred(&app, model).await;
        if !reached.is_empty() {
            wrong.push(format!("{model} -> key sent to {reached:?}, HTTP {status}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[tokio::test]
async fn inference_holds_for_the_names_the_readme_lists() {
    let app = spawn_app().await;
    let body = |m: &str| {
        let mut b = request(m, "q");
        b["dry_run"] = json!(true);
        b
    };
    for (model, counter) in [
        ("GPT-4O", "o200k_base"),
        ("Claude-Sonnet-4-5", "approximation"),
        ("o1ama-local", "o200k_base"),
    ] {
        let (status, reply) = try_step(&app, &body(model)).await.unwrap();
        assert_eq!(status, 200, "{model}: {reply}");
        assert_eq!(reply["context_report"]["counter"], counter, "{model}");
    }
    // No name at all, or only a prefix's vendor part: a 400, never a guess.
    for model in ["", " ", "openrouter", "/", "anthropic"] {
        let (status, _) = try_step(&app, &body(model)).await.unwrap();
        assert_eq!(status, 400, "{model:?}");
    }
    assert!(app.llm.received_requests().await.unwrap().is_empty());
}
