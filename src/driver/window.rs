//! The context window a local model server says it serves, so that `reactstep run` sends a
//! `tokenLimit` the model can take instead of a hosted model's 128,000 tokens. llama.cpp tells
//! it at `/props`, vLLM and llama.cpp in their `/v1/models` list, Ollama at `/api/show`.

use std::time::Duration;

use serde_json::{json, Value};

/// A window and the place that told it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub tokens: u32,
    pub source: String,
}

/// How long one question to the model server may take.
const PATIENCE: Duration = Duration::from_secs(5);

/// Ollama sets its window to `tokenLimit` (the service sends it as `num_ctx`), so a model
/// trained on 128k tokens would get a cache that size; this is what the driver asks for unless
/// the model's own settings or `--token-limit` say otherwise.
pub const OLLAMA_DEFAULT_CAP: u32 = 32_768;

/// Asks the server at `base_url` for the window `model` is served with.
pub async fn ask(provider: &str, base_url: &str, model: &str) -> Result<Window, String> {
    let http = reqwest::Client::builder()
        .timeout(PATIENCE)
        .build()
        .map_err(|e| e.to_string())?;
    let said = match provider {
        "ollama" => ollama(&http, base_url, model).await,
        _ => openai_compatible(&http, base_url, model).await,
    };
    said.map(|window| Window {
        tokens: window.tokens.min(MOST_TOKENS),
        ..window
    })
}

/// The most of a model server's answer read: llama.cpp's `/props` holds the chat template,
/// tens of kilobytes; a server sending more is not read on.
const MOST_BYTES: usize = 4 << 20;
/// The largest `tokenLimit` the service takes.
const MOST_TOKENS: u32 = 10_000_000;

async fn get_json(request: reqwest::RequestBuilder) -> Result<Value, String> {
    let mut response = request.send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("HTTP {status}"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MOST_BYTES {
            return Err(format!("the answer is larger than {MOST_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| format!("not JSON: {e}"))
}

async fn ollama(http: &reqwest::Client, base_url: &str, model: &str) -> Result<Window, String> {
    let url = format!("{}/api/show", base_url.trim_end_matches('/'));
    let shown = get_json(http.post(&url).json(&json!({ "model": model })))
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    ollama_window(&shown)
        .map(|tokens| Window {
            tokens,
            source: format!("Ollama's /api/show for {model}"),
        })
        .ok_or_else(|| format!("{url} names no context length for {model}"))
}

/// The model's `num_ctx` when its settings fix one, else its trained length up to the cap.
pub fn ollama_window(shown: &Value) -> Option<u32> {
    let configured = shown["parameters"].as_str().and_then(|text| {
        text.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("num_ctx")).then(|| words.next()?.parse().ok())?
        })
    });
    let trained = || {
        shown["model_info"]
            .as_object()?
            .iter()
            .find_map(|(key, v)| {
                key.ends_with(".context_length")
                    .then(|| u32::try_from(v.as_u64()?).ok())?
            })
    };
    configured
        .or_else(|| trained().map(|n| n.min(OLLAMA_DEFAULT_CAP)))
        .filter(|&n| n > 0)
}

async fn openai_compatible(
    http: &reqwest::Client,
    base_url: &str,
    model: &str,
) -> Result<Window, String> {
    let base = base_url.trim_end_matches('/');
    let root = base.strip_suffix("/v1").unwrap_or(base);
    let props = format!("{root}/props");
    let props_said = match get_json(http.get(&props)).await {
        Ok(body) => match props_window(&body) {
            Some(tokens) => {
                return Ok(Window {
                    tokens,
                    source: "llama.cpp's /props".into(),
                })
            }
            None => format!("{props} names no n_ctx"),
        },
        Err(e) => format!("{props}: {e}"),
    };
    let models = format!("{base}/models");
    let listed = get_json(http.get(&models))
        .await
        .map_err(|e| format!("{props_said}; {models}: {e}"))?;
    models_window(&listed, model)
        .map(|tokens| Window {
            tokens,
            source: models.clone(),
        })
        .ok_or_else(|| format!("{props_said}; {models} names no window for {model}"))
}

/// llama.cpp: the window of one slot.
pub fn props_window(props: &Value) -> Option<u32> {
    [
        &props["default_generation_settings"]["n_ctx"],
        &props["n_ctx"],
    ]
    .into_iter()
    .find_map(|n| u32::try_from(n.as_u64()?).ok())
    .filter(|&n| n > 0)
}

/// vLLM's `max_model_len`, llama.cpp's `meta.n_ctx`: of the model named, or of the only one.
pub fn models_window(listed: &Value, model: &str) -> Option<u32> {
    let models = listed["data"].as_array()?;
    let entry = match models.iter().find(|m| m["id"] == model) {
        Some(entry) => entry,
        None if models.len() == 1 => &models[0],
        None => return None,
    };
    [&entry["max_model_len"], &entry["meta"]["n_ctx"]]
        .into_iter()
        .find_map(|n| u32::try_from(n.as_u64()?).ok())
        .filter(|&n| n > 0)
}

/// The output kept for the answer in a window: 4,000 tokens, or a quarter of a small window.
pub fn reserved_for(window: u32) -> u32 {
    (window / 4).clamp(1, 4_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ollama_prefers_the_models_own_num_ctx_then_its_trained_length_capped() {
        let set = json!({"parameters": "stop \"<|im_end|>\"\nnum_ctx    8192\n",
                         "model_info": {"qwen2.context_length": 32768}});
        assert_eq!(ollama_window(&set), Some(8192));
        let trained = json!({"model_info": {"llama.context_length": 131072}});
        assert_eq!(ollama_window(&trained), Some(OLLAMA_DEFAULT_CAP));
        let small = json!({"model_info": {"gemma3.context_length": 8192}});
        assert_eq!(ollama_window(&small), Some(8192));
        for nothing in [
            json!({}),
            json!({"parameters": "num_ctx x"}),
            json!({"model_info": {"x.context_length": 0}}),
        ] {
            assert_eq!(ollama_window(&nothing), None, "{nothing}");
        }
    }

    #[test]
    fn llama_cpp_props_and_model_lists_are_read() {
        assert_eq!(
            props_window(&json!({"default_generation_settings": {"n_ctx": 4096}})),
            Some(4096)
        );
        assert_eq!(props_window(&json!({"n_ctx": 2048})), Some(2048));
        assert_eq!(props_window(&json!({"n_ctx": "big"})), None);
        let vllm = json!({"data": [{"id": "a", "max_model_len": 16384}, {"id": "b", "max_model_len": 8192}]});
        assert_eq!(models_window(&vllm, "b"), Some(8192));
        assert_eq!(models_window(&vllm, "c"), None, "two models, neither named");
        let one = json!({"data": [{"id": "-", "meta": {"n_ctx": 4096, "n_ctx_train": 32768}}]});
        assert_eq!(models_window(&one, "qwen"), Some(4096));
    }

    #[test]
    fn a_small_window_keeps_a_quarter_for_the_answer() {
        assert_eq!(reserved_for(4096), 1024);
        assert_eq!(reserved_for(128_000), 4000);
        assert_eq!(reserved_for(2), 1);
    }
}
