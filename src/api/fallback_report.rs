//! What an answer says of `llm_config.fallbacks`: the models that failed (`fallback_attempts`),
//! each with its error as the step's own would be answered and what its calls cost, and the
//! step's cost summed over every model at that model's price.

use super::response::{FallbackAttemptDto, ReactStepResponse, UsageDto};
use crate::llm::Usage;
use crate::prices::Price;
use crate::step::{FailedAttempt, StepError, StepOutput};

/// How an error is answered: its `error.type` and message (`api::error` holds the table).
pub type Describe = fn(&StepError) -> (&'static str, String);

/// The prices of the request's models, the first one's then each fallback's, when it names
/// fallbacks; empty otherwise.
pub type ChainPrices = [(String, Option<Price>)];

fn price_of(prices: &ChainPrices, model: &str) -> Option<Price> {
    prices
        .iter()
        .find(|(m, _)| m == model)
        .and_then(|(_, p)| *p)
}

/// The answer to a step, with the models that failed before the one that answered, and its
/// cost summed over all of them.
pub fn success(
    mut output: StepOutput,
    request_id: String,
    price: Option<Price>,
    prices: &ChainPrices,
    describe: Describe,
) -> ReactStepResponse {
    let failed = std::mem::take(&mut output.fallback_attempts);
    let answered = output
        .model_used
        .as_ref()
        .map(|m| (m.model.clone(), m.usage));
    let mut body = ReactStepResponse::success(output, request_id, price);
    if failed.is_empty() {
        return body;
    }
    let parts = failed
        .iter()
        .map(|a| (a.model.as_str(), a.usage))
        .chain(answered.as_ref().map(|(m, u)| (m.as_str(), *u)));
    let cost = chain_cost(parts, prices);
    if let Some(usage) = &mut body.usage {
        usage.cost_usd = cost;
    }
    body.fallback_attempts = attempts(&failed, None, prices, describe);
    body
}

/// `fallback_attempts` as answered; an entry without its own error is the last model's, whose
/// error is `last` (the step's).
pub fn attempts(
    failed: &[FailedAttempt],
    last: Option<&StepError>,
    prices: &ChainPrices,
    describe: Describe,
) -> Vec<FallbackAttemptDto> {
    failed
        .iter()
        .filter_map(|attempt| {
            let (error_type, message) = describe(attempt.error.as_deref().or(last)?);
            Some(FallbackAttemptDto {
                provider: attempt.provider,
                model_name: attempt.model.clone(),
                error_type,
                message,
                usage: attempt
                    .usage
                    .map(|u| UsageDto::new(u, price_of(prices, &attempt.model))),
            })
        })
        .collect()
}

/// The cost of the calls every model made, each at its model's price: absent unless every model
/// that billed anything has one.
pub fn chain_cost<'a>(
    parts: impl Iterator<Item = (&'a str, Option<Usage>)>,
    prices: &ChainPrices,
) -> Option<f64> {
    let mut nanos = 0.0;
    for (model, usage) in parts {
        let Some(usage) = usage else { continue };
        // Each cost is rounded to a billionth of a dollar; so is the sum.
        nanos += (price_of(prices, model)?.cost(&usage) * 1e9).round();
    }
    Some(nanos / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(prompt: u64, completion: u64) -> Option<Usage> {
        Some(Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            ..Usage::default()
        })
    }

    fn price(input: f64, output: f64) -> Option<Price> {
        Some(Price {
            input,
            cached_input: input,
            cache_write: input,
            output,
        })
    }

    #[test]
    fn each_model_is_priced_at_its_own_price_and_one_unpriced_bill_leaves_no_cost() {
        let prices = [
            ("a".to_string(), price(1.0, 2.0)),
            ("b".to_string(), price(3.0, 4.0)),
            ("c".to_string(), None),
        ];
        // 1000 × 1 + 100 × 2 = 1,200 and 10 × 3 + 1 × 4 = 34 per million tokens.
        let parts = [("a", usage(1000, 100)), ("b", usage(10, 1))];
        assert_eq!(chain_cost(parts.into_iter(), &prices), Some(0.001234));
        // A model that billed nothing needs no price.
        let parts = [("a", usage(1000, 100)), ("c", None)];
        assert_eq!(chain_cost(parts.into_iter(), &prices), Some(0.0012));
        let parts = [("a", usage(1000, 100)), ("c", usage(1, 1))];
        assert_eq!(chain_cost(parts.into_iter(), &prices), None);
    }
}
