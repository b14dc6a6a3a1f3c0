//! How much of each prompt in a loop is the previous one's prefix: what a provider's prompt
//! cache can reuse from step to step.

/// For each prompt after the first, the share of it (in bytes) that is a byte-identical prefix
/// of the one before.
pub fn reused_shares(prompts: &[String]) -> Vec<f64> {
    prompts
        .windows(2)
        .map(|pair| {
            let shared = pair[0]
                .bytes()
                .zip(pair[1].bytes())
                .take_while(|(a, b)| a == b)
                .count();
            shared as f64 / pair[1].len() as f64
        })
        .collect()
}

/// The mean of [`reused_shares`].
pub fn mean(shares: &[f64]) -> f64 {
    shares.iter().sum::<f64>() / shares.len() as f64
}
