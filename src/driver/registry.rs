//! The tools a loop offers the model: each a name, something that runs it, and what the model
//! is told about it. The registry renders them into the request's `tools`.

use std::collections::BTreeMap;

use futures_util::future::BoxFuture;
use serde_json::{json, Map, Value};

/// What running a tool gave.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutcome {
    /// The observation the model reads.
    Done(String),
    /// The tool failed; the model reads why, and may try something else.
    Failed(String),
    /// The model's answer: the loop ends with success.
    Submitted {
        answer: String,
        confidence: Option<f64>,
    },
}

/// A tool the loop can run. A tool that waits on something else (an MCP server, the network)
/// returns a future; a plain function of the arguments is a tool as it is.
pub trait Tool: Send + Sync {
    fn call<'a>(&'a self, args: &'a Map<String, Value>) -> BoxFuture<'a, ToolOutcome>;
}

/// A plain function runs on a thread of its own: whatever it waits on (a slow disk, a file
/// system that hangs), the loop's deadline and Ctrl-C still reach the loop, which leaves the
/// thread behind; a thread left behind ends with the process.
impl<F> Tool for F
where
    F: Fn(&Map<String, Value>) -> ToolOutcome + Clone + Send + Sync + 'static,
{
    fn call<'a>(&'a self, args: &'a Map<String, Value>) -> BoxFuture<'a, ToolOutcome> {
        let (tool, args) = (self.clone(), args.clone());
        let (done, outcome) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name("reactstep-tool".into())
            .spawn(move || {
                let _ = done.send(tool(&args));
            });
        Box::pin(async move {
            if let Err(e) = spawned {
                return ToolOutcome::Failed(format!("the tool could not start: {e}"));
            }
            outcome.await.unwrap_or_else(|_| {
                ToolOutcome::Failed("the tool stopped without an answer".into())
            })
        })
    }
}

/// Where tools come from that may change while the loop runs (an MCP server whose list goes
/// stale): asked before each step.
pub trait ToolSource: Send + Sync {
    /// Lists the tools again into `registry` when they have gone stale; a line saying what
    /// changed, or why the list could not be had, when it did.
    fn refresh<'a>(&'a self, registry: &'a mut ToolRegistry) -> BoxFuture<'a, Option<String>>;
}

/// What the model is told about a tool, and how the loop may treat it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolMetadata {
    pub description: String,
    pub category: String,
    /// A JSON Schema for the arguments.
    pub parameters: Value,
    pub examples: Vec<Value>,
    /// The tool changes nothing, so the same call may be answered again from before, and
    /// `--approve writes` runs it without asking.
    pub read_only: bool,
    /// The tool may delete or overwrite something: said when approval is asked for.
    pub destructive: bool,
}

struct Entry {
    tool: Box<dyn Tool>,
    metadata: ToolMetadata,
}

#[derive(Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Entry>,
    /// The names in the order they were first registered: the order the model is shown them
    /// in, since a small model tends to call the first tool it reads.
    order: Vec<String>,
}

impl ToolRegistry {
    /// Adds a tool, or replaces the one of that name.
    pub fn register(&mut self, name: &str, tool: impl Tool + 'static, metadata: ToolMetadata) {
        let entry = Entry {
            tool: Box::new(tool),
            metadata,
        };
        if self.tools.insert(name.to_string(), entry).is_none() {
            self.order.push(name.to_string());
        }
    }

    /// Takes out the tools of `category`, in their order, as a registry of their own.
    pub fn take_category(&mut self, category: &str) -> ToolRegistry {
        let mut taken = ToolRegistry::default();
        let names: Vec<String> = self.order.clone();
        for name in names {
            if self
                .tools
                .get(&name)
                .is_some_and(|e| e.metadata.category == category)
            {
                if let Some(entry) = self.tools.remove(&name) {
                    taken.tools.insert(name.clone(), entry);
                    taken.order.push(name.clone());
                }
                self.order.retain(|n| *n != name);
            }
        }
        taken
    }

    /// Adds the tools of `other`, in its order, replacing any of the same name.
    pub fn absorb(&mut self, mut other: ToolRegistry) {
        for name in std::mem::take(&mut other.order) {
            if let Some(entry) = other.tools.remove(&name) {
                if self.tools.insert(name.clone(), entry).is_none() {
                    self.order.push(name);
                }
            }
        }
    }

    pub fn get(&self, name: &str) -> Option<(&dyn Tool, &ToolMetadata)> {
        self.tools.get(name).map(|e| (e.tool.as_ref(), &e.metadata))
    }

    pub fn has(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    /// The names of the tools, of one category or all, in name order.
    pub fn list(&self, category: Option<&str>) -> Vec<&str> {
        self.tools
            .iter()
            .filter(|(_, e)| category.is_none_or(|c| e.metadata.category == c))
            .map(|(name, _)| name.as_str())
            .collect()
    }

    /// The tools as the request's `tools` field declares them, in the order they were
    /// registered (the workspace's tools first, then the plain ones, then MCP servers').
    pub fn declarations(&self) -> Value {
        let tools: Vec<Value> = self
            .order
            .iter()
            .filter_map(|name| Some((name, self.tools.get(name)?)))
            .map(|(name, e)| {
                json!({
                    "name": name,
                    "description": e.metadata.description,
                    "parameters": e.metadata.parameters,
                })
            })
            .collect();
        Value::Array(tools)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(category: &str) -> ToolMetadata {
        ToolMetadata {
            description: "d".into(),
            category: category.into(),
            parameters: json!({"type": "object"}),
            examples: Vec::new(),
            read_only: true,
            destructive: false,
        }
    }

    #[tokio::test]
    async fn tools_are_registered_listed_by_category_and_declared() {
        let mut registry = ToolRegistry::default();
        registry.register(
            "b",
            |_: &Map<String, Value>| ToolOutcome::Done("B".into()),
            meta("files"),
        );
        registry.register(
            "a",
            |_: &Map<String, Value>| ToolOutcome::Done("A".into()),
            meta("math"),
        );
        assert!(registry.has("a") && !registry.has("c"));
        assert_eq!(registry.list(None), ["a", "b"]);
        assert_eq!(registry.list(Some("files")), ["b"]);
        let (tool, _) = registry.get("b").unwrap_or_else(|| panic!("b"));
        assert_eq!(tool.call(&Map::new()).await, ToolOutcome::Done("B".into()));
        // Declared in the order registered: the model reads the first one first.
        assert_eq!(registry.declarations()[0]["name"], "b");
        assert_eq!(registry.declarations()[1]["name"], "a");
        registry.register(
            "b",
            |_: &Map<String, Value>| ToolOutcome::Done("B2".into()),
            meta("files"),
        );
        assert_eq!(
            registry.declarations().as_array().map(Vec::len),
            Some(2),
            "a tool registered again is replaced in its place, not declared twice"
        );
        assert_eq!(registry.declarations()[0]["name"], "b");
    }
}
