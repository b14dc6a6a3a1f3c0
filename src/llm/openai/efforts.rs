//! The reasoning efforts each model takes, where it takes fewer than all: OpenAI's `gpt-5`
//! family has `minimal` and no `none`, `gpt-5.1` and later `none` and no `minimal`, the `o`
//! series and the Codex models neither, `gpt-5-pro` only `high`; Gemini's Pro models cannot
//! think less than a little ("Budget 0 is invalid. This model only works in thinking mode").
//! Each refuses the whole request for another value, so the nearest it takes is sent.

use crate::llm::ReasoningEffort::{self, High, Low, Medium, Minimal, None};

/// The efforts a model takes, from least to most.
pub type Efforts = fn(&str) -> &'static [ReasoningEffort];

const ALL: &[ReasoningEffort] = &[None, Minimal, Low, Medium, High];

pub fn any(_model: &str) -> &'static [ReasoningEffort] {
    ALL
}

/// OpenAI's reasoning models (on Azure too).
pub fn openai(model: &str) -> &'static [ReasoningEffort] {
    let m = model.to_ascii_lowercase();
    let m = m.strip_prefix("ft:").unwrap_or(&m);
    if m.starts_with("gpt-5-pro") {
        return &[High];
    }
    if m.starts_with('o') || m.contains("codex") {
        return &[Low, Medium, High];
    }
    match m.strip_prefix("gpt-5.") {
        Some(_) => &[None, Low, Medium, High],
        Option::None if m.starts_with("gpt-5") => &[Minimal, Low, Medium, High],
        Option::None => ALL,
    }
}

/// Gemini's models through its OpenAI-compatible endpoint.
pub fn gemini(model: &str) -> &'static [ReasoningEffort] {
    match model.to_ascii_lowercase().contains("-pro") {
        true => &[Minimal, Low, Medium, High],
        false => ALL,
    }
}

/// The effort sent for `wanted`: itself where the model takes it, else the least it takes
/// above it, else the most it takes.
pub fn nearest(wanted: ReasoningEffort, takes: &[ReasoningEffort]) -> ReasoningEffort {
    let above = takes.iter().find(|e| **e >= wanted);
    above.or(takes.last()).copied().unwrap_or(wanted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_model_gets_the_nearest_effort_it_takes() {
        for (model, wanted, sent) in [
            ("gpt-5", None, Minimal),
            ("gpt-5-mini", Minimal, Minimal),
            ("gpt-5.1", Minimal, Low),
            ("gpt-5.1", None, None),
            ("gpt-5-pro", Low, High),
            ("o3", None, Low),
            ("o4-mini", High, High),
            ("gpt-5.1-codex", Minimal, Low),
            ("ft:gpt-5-mini:org::x", None, Minimal),
            ("gemini-2.5-pro", None, Minimal),
            ("gemini-2.5-flash", None, None),
            ("gemini-3-pro-preview", None, Minimal),
        ] {
            let takes = match model.starts_with("gemini") {
                true => gemini(model),
                false => openai(model),
            };
            assert_eq!(nearest(wanted, takes), sent, "{model} {wanted:?}");
        }
        assert_eq!(nearest(High, any("x")), High);
    }
}
