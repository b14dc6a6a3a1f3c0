//! Which tools a loop may declare, judged as the service will judge the request: at most
//! `MAX_TOOLS` in all, a name it accepts, a description of at most `MAX_TOOL_DESCRIPTION_CHARS`
//! characters, and a parameters schema that compiles within the cost bounds, alone and with the
//! others (`step/tools/schema_limits.rs`). An MCP server's tools are admitted one by one before the
//! first step, so a tool the service would refuse is left out at start, with the reason,
//! instead of failing every step with 400.

use serde_json::Value;

use super::registry::ToolRegistry;
use crate::api::{tool_name_refusal, MAX_TOOLS, MAX_TOOL_DESCRIPTION_CHARS};
use crate::step::tools::schema_limits::Totals;
use crate::step::tools::{Catalog, ToolSpec};

/// Why a tool is left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The request already declares as many tools as the service accepts.
    Full,
    /// The service would refuse this tool: the reason.
    Refused(String),
}

/// The tools admitted so far: how many, and what their schemas cost together.
#[derive(Debug, Default)]
pub struct Admission {
    count: usize,
    totals: Totals,
}

impl Admission {
    /// Starts from the tools already registered (the built-in ones), which are always declared.
    pub fn of(registry: &ToolRegistry) -> Self {
        let mut admission = Self::default();
        for tool in registry.declarations().as_array().into_iter().flatten() {
            admission.count += 1;
            // The built-in schemas are small and fixed; their cost counts toward the totals.
            let _ = admission.totals.admit(&tool["parameters"]);
        }
        admission
    }

    /// Admits one tool; the description as it will be declared (cut to the service's limit).
    pub fn admit(
        &mut self,
        name: &str,
        description: &str,
        schema: &Value,
    ) -> Result<String, Refusal> {
        if self.count as u64 >= MAX_TOOLS {
            return Err(Refusal::Full);
        }
        if let Some(why) = tool_name_refusal(name) {
            return Err(Refusal::Refused(why));
        }
        let description: String = description
            .chars()
            .take(MAX_TOOL_DESCRIPTION_CHARS as usize)
            .collect();
        // The service's own check, on this tool alone: the schema is an object, within the
        // bounds, and compiles.
        let spec = ToolSpec {
            name: name.to_string(),
            description: description.clone(),
            parameters: schema.clone(),
        };
        Catalog::new(vec![spec], "").map_err(|(_, why)| {
            // The catalog names the tool by its place in a request: the caller names it better.
            let prefix = format!("tools[0] '{name}': ");
            Refusal::Refused(why.strip_prefix(&prefix).unwrap_or(&why).to_string())
        })?;
        self.totals.admit(schema).map_err(Refusal::Refused)?;
        self.count += 1;
        Ok(description)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn names_schemas_and_the_count_are_judged_as_the_service_judges_them() {
        let mut admission = Admission::default();
        let plain = json!({"type": "object", "properties": {}});
        assert!(admission.admit("read.file-2", "d", &plain).is_ok());
        for bad in ["has space", "a/b", "9lives", ""] {
            let refused = admission.admit(bad, "d", &plain);
            assert!(
                matches!(refused, Err(Refusal::Refused(_))),
                "{bad}: {refused:?}"
            );
        }
        let long = "n".repeat(65);
        assert!(
            matches!(admission.admit(&long, "d", &plain), Err(Refusal::Refused(w)) if w.contains("64"))
        );
        let mut deep = json!({"type": "object"});
        for _ in 0..40 {
            deep = json!({"type": "object", "properties": {"a": deep}});
        }
        assert!(
            matches!(admission.admit("deep", "d", &deep), Err(Refusal::Refused(w)) if w.contains("deep")),
            "{:?}",
            admission.admit("deep", "d", &deep)
        );
        assert!(matches!(
            admission.admit("not_object", "d", &json!(true)),
            Err(Refusal::Refused(_))
        ));
        let kept = admission.admit("wordy", &"w".repeat(20_000), &plain);
        assert_eq!(kept.map(|d| d.len()), Ok(10_000));
        for n in 2..MAX_TOOLS {
            assert!(admission.admit(&format!("t{n}"), "", &plain).is_ok(), "{n}");
        }
        assert_eq!(admission.admit("one_more", "", &plain), Err(Refusal::Full));
    }
}
