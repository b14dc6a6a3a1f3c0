//! The operator's price table (`REACTSTEP_PRICES_FILE`): US dollars per million tokens, by model
//! name, to put a figure on what a step's calls cost (`usage.cost_usd`). Read and checked once at
//! start-up; a table that is not exactly right stops the service rather than mispricing steps.

use std::collections::HashMap;
use std::path::Path;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::llm::Usage;

/// Largest price file read: a table of every model of every provider is a few KiB.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Highest price taken, in dollars per million tokens (a dollar a token): anything above is a
/// typo, and below it no token count can carry a cost past what an `f64` holds.
pub const MAX_PRICE: f64 = 1_000_000.0;

/// One model's prices, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// Prompt tokens neither read from nor written to a cache.
    pub input: f64,
    /// Prompt tokens read from the provider's cache.
    pub cached_input: f64,
    /// Prompt tokens written to the provider's cache.
    pub cache_write: f64,
    pub output: f64,
}

impl Price {
    /// What `usage` cost, in dollars, rounded to a billionth of a dollar (so that a sum such as
    /// 0.005615 reads as written, not as 0.0056150000000000004).
    ///
    /// Cache reads and writes are part of `prompt_tokens` (the providers' mappings make them so);
    /// figures that claim more than all of it are priced as at most all of it, so the tokens
    /// priced are never more than the tokens reported. Usage summed over a step's calls prices
    /// the same as each call priced and summed, since every call is to the same model.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let prompt = usage.prompt_tokens;
        let cached = usage.cached_prompt_tokens.unwrap_or(0).min(prompt);
        let written = usage
            .cache_creation_prompt_tokens
            .unwrap_or(0)
            .min(prompt.saturating_sub(cached));
        let fresh = prompt.saturating_sub(cached).saturating_sub(written);
        let per_million = fresh as f64 * self.input
            + cached as f64 * self.cached_input
            + written as f64 * self.cache_write
            + usage.completion_tokens as f64 * self.output;
        // Dollars per million tokens × tokens / 10⁶ = dollars; × 10⁹ = nano-dollars.
        (per_million * 1e3).round() / 1e9
    }
}

/// The table as the file gives it; a model it does not name has no price.
#[derive(Debug, Default)]
pub struct Prices(HashMap<String, Price>);

impl Prices {
    /// Reads and checks the file; the error says what is wrong, to follow the file's name. A
    /// FIFO, a device or a directory is refused without waiting on it (`crate::start_file`).
    pub fn load(path: &Path) -> Result<Self, String> {
        Self::parse(&crate::start_file::read(path, MAX_FILE_BYTES)?)
    }

    /// Parses and checks a table.
    pub fn parse(json: &[u8]) -> Result<Self, String> {
        let mut deserializer = serde_json::Deserializer::from_slice(json);
        let table: Table = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
            let at = e.path().to_string();
            let inner = e.into_inner();
            if at == "." {
                format!("is not a valid price table: {inner}")
            } else {
                format!("is not a valid price table: at {at}: {inner}")
            }
        })?;
        deserializer
            .end()
            .map_err(|e| format!("is not a valid price table: {e}"))?;
        let mut prices = HashMap::with_capacity(table.0.len());
        for (model, entry) in table.0 {
            let price = entry.checked(&model)?;
            if prices.insert(model.clone(), price).is_some() {
                return Err(format!("prices the model `{model}` twice"));
            }
        }
        Ok(Self(prices))
    }

    /// The price of a model, by its name exactly as the request gave it.
    pub fn get(&self, model: &str) -> Option<Price> {
        self.0.get(model).copied()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One model's entry as written; the cache prices default to the input price (a provider that
/// bills cache reads and writes apart says so).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    input: f64,
    output: f64,
    #[serde(default)]
    cached_input: Option<f64>,
    #[serde(default)]
    cache_write: Option<f64>,
}

impl Entry {
    fn checked(self, model: &str) -> Result<Price, String> {
        let price = Price {
            input: self.input,
            cached_input: self.cached_input.unwrap_or(self.input),
            cache_write: self.cache_write.unwrap_or(self.input),
            output: self.output,
        };
        for (name, value) in [
            ("input", price.input),
            ("cached_input", price.cached_input),
            ("cache_write", price.cache_write),
            ("output", price.output),
        ] {
            // NaN fails both comparisons, as it should.
            if !(0.0..=MAX_PRICE).contains(&value) {
                return Err(format!(
                    "gives `{model}`.{name} as {value}: a price is dollars per million tokens, from 0 to {MAX_PRICE}"
                ));
            }
        }
        Ok(price)
    }
}

/// The entries in the file's order, duplicates kept so that they can be refused (a JSON map
/// read into a `HashMap` would keep the last silently).
struct Table(Vec<(String, Entry)>);

impl<'de> Deserialize<'de> for Table {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = Table;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of model names to prices")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Table, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Table(entries))
            }
        }
        deserializer.deserialize_map(Entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(input: f64, cached_input: f64, cache_write: f64, output: f64) -> Price {
        Price {
            input,
            cached_input,
            cache_write,
            output,
        }
    }

    fn usage(prompt: u64, cached: Option<u64>, written: Option<u64>, completion: u64) -> Usage {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            cached_prompt_tokens: cached,
            cache_creation_prompt_tokens: written,
            ..Usage::default()
        }
    }

    #[test]
    fn each_kind_of_token_is_priced_at_its_own_rate() {
        let p = price(2.5, 1.25, 3.75, 10.0);
        // 86 fresh × 2.5 + 1920 cached × 1.25 + 300 out × 10 = 5615 per million.
        assert_eq!(p.cost(&usage(2006, Some(1920), None, 300)), 0.005615);
        // 12 fresh × 2.5 + 3000 × 1.25 + 500 written × 3.75 + 20 × 10 = 5855 per million.
        assert_eq!(p.cost(&usage(3512, Some(3000), Some(500), 20)), 0.005855);
        assert_eq!(p.cost(&usage(1_000_000, None, None, 0)), 2.5);
        assert_eq!(p.cost(&usage(0, None, None, 1_000_000)), 10.0);
        assert_eq!(p.cost(&Usage::default()), 0.0);
    }

    #[test]
    fn the_cost_is_rounded_to_a_billionth_of_a_dollar() {
        // 3000 × 0.3 is 900.0000000000001 in binary; the figure reads as the decimal one.
        let p = price(3.0, 0.3, 3.75, 15.0);
        assert_eq!(p.cost(&usage(3512, Some(3000), Some(500), 20)), 0.003111);
        // One token at a cent per million is 1e-8 dollars: kept, not rounded away.
        assert_eq!(
            price(0.01, 0.01, 0.01, 0.01).cost(&usage(1, None, None, 0)),
            1e-8
        );
    }

    #[test]
    fn cache_figures_beyond_the_prompt_price_no_more_tokens_than_the_prompt() {
        let p = price(1.0, 10.0, 100.0, 0.0);
        // All 10 prompt tokens cached; the 5 written have no prompt tokens left to be.
        assert_eq!(
            p.cost(&usage(10, Some(50), Some(5), 0)),
            p.cost(&usage(10, Some(10), None, 0))
        );
        assert_eq!(p.cost(&usage(10, Some(50), Some(5), 0)), 0.0001);
        // Writes take what reads left.
        assert_eq!(p.cost(&usage(10, Some(4), Some(50), 0)), 0.00064);
    }

    #[test]
    fn the_largest_counts_at_the_highest_price_stay_finite() {
        let p = price(MAX_PRICE, MAX_PRICE, MAX_PRICE, MAX_PRICE);
        let cost = p.cost(&usage(u64::MAX, Some(u64::MAX), Some(u64::MAX), u64::MAX));
        assert!(cost.is_finite() && cost > 0.0, "{cost}");
    }

    #[test]
    fn a_table_parses_with_cache_prices_defaulting_to_the_input_price() {
        let table = Prices::parse(
            br#"{"gpt-4o": {"input": 2.5, "cached_input": 1.25, "output": 10},
                 "claude-sonnet-4-5": {"input": 3, "cached_input": 0.3, "cache_write": 3.75, "output": 15},
                 "local": {"input": 0, "output": 0}}"#,
        );
        let Ok(table) = table else {
            panic!("{table:?}")
        };
        assert_eq!(table.len(), 3);
        assert_eq!(table.get("gpt-4o"), Some(price(2.5, 1.25, 2.5, 10.0)));
        assert_eq!(
            table.get("claude-sonnet-4-5"),
            Some(price(3.0, 0.3, 3.75, 15.0))
        );
        assert_eq!(table.get("local"), Some(price(0.0, 0.0, 0.0, 0.0)));
        // Exact names only: no prefix, case or provider matching.
        assert_eq!(table.get("GPT-4o"), None);
        assert_eq!(table.get("gpt-4o-mini"), None);
        assert!(Prices::parse(b"{}").is_ok_and(|t| t.is_empty()));
    }

    #[test]
    fn a_wrong_table_is_refused_saying_what_is_wrong() {
        let refused = |json: &str, says: &[&str]| {
            let Err(message) = Prices::parse(json.as_bytes()) else {
                panic!("{json} was taken")
            };
            for part in says {
                assert!(message.contains(part), "{json}: {message:?} lacks {part:?}");
            }
        };
        refused(r#"{"m": {"input": -1, "output": 1}}"#, &["`m`.input", "-1"]);
        refused(
            r#"{"m": {"input": 1, "output": 1, "cache_write": -0.5}}"#,
            &["`m`.cache_write"],
        );
        refused(r#"{"m": {"input": 1, "output": 2e6}}"#, &["`m`.output"]);
        refused(
            r#"{"m": {"input": 1e999, "output": 1}}"#,
            &["number out of range"],
        );
        refused(
            r#"{"m": {"input": 1, "output": 1, "outptu": 1}}"#,
            &["at m", "unknown field `outptu`"],
        );
        refused(
            r#"{"m": {"input": 1}}"#,
            &["at m", "missing field `output`"],
        );
        refused(r#"{"m": {"output": 1}}"#, &["missing field `input`"]);
        refused(
            r#"{"m": {"input": "1", "output": 1}}"#,
            &["at m.input", "invalid type"],
        );
        refused(r#"{"m": {"input": null, "output": 1}}"#, &["at m.input"]);
        refused(
            r#"{"m": {"input": 1, "output": 1}, "m": {"input": 2, "output": 2}}"#,
            &["`m` twice"],
        );
        refused(
            r#"[{"input": 1, "output": 1}]"#,
            &["an object of model names"],
        );
        refused("not json", &["not a valid price table"]);
        refused(
            r#"{"m": {"input": 1, "output": 1}} {}"#,
            &["trailing characters"],
        );
        refused("", &["EOF"]);
    }

    #[test]
    fn the_file_is_read_up_to_its_cap() {
        let Ok(dir) = tempfile::tempdir() else {
            panic!("a temporary folder")
        };
        let path = dir.path().join("prices.json");
        // Valid JSON, padded with spaces past the cap: refused for its size, not parsed.
        let mut big = br#"{"m": {"input": 1, "output": 1}}"#.to_vec();
        big.resize(MAX_FILE_BYTES as usize + 1, b' ');
        assert!(std::fs::write(&path, &big).is_ok());
        assert!(Prices::load(&path).is_err_and(|e| e.contains("larger than 1048576 bytes")));
        big.truncate(MAX_FILE_BYTES as usize);
        assert!(std::fs::write(&path, &big).is_ok());
        assert!(Prices::load(&path).is_ok_and(|t| t.get("m").is_some()));
        assert!(Prices::load(&dir.path().join("absent.json"))
            .is_err_and(|e| e.starts_with("cannot be read")));
        assert!(Prices::load(dir.path()).is_err_and(|e| e.starts_with("is a directory")));
    }
}
