//! What is sent: keys drawn uniformly or by Zipf, substituted into the descriptor templates.

use floodgate::proto::rate_limit_descriptor::Entry;
use floodgate::proto::{RateLimitDescriptor, RateLimitRequest};
use rand::Rng;

use crate::cli::{DescriptorTemplate, Part};

/// Most keys a Zipf draw supports (its table takes 8 bytes a key).
pub const MAX_ZIPF_KEYS: u64 = 10_000_000;

/// Draws key indexes in `0..keys`.
#[derive(Debug)]
pub enum KeyPicker {
    Uniform(u64),
    /// The cumulative distribution: `cdf[i]` is P(index <= i).
    Zipf(Vec<f64>),
}

impl KeyPicker {
    pub fn new(keys: u64, zipf: Option<f64>) -> Result<Self, String> {
        let Some(exponent) = zipf else {
            return Ok(Self::Uniform(keys.max(1)));
        };
        if keys > MAX_ZIPF_KEYS {
            return Err(format!(
                "--zipf supports at most {MAX_ZIPF_KEYS} keys (got --keys {keys})"
            ));
        }
        let weights: Vec<f64> = (1..=keys)
            .map(|rank| (rank as f64).powf(-exponent))
            .collect();
        let sum: f64 = weights.iter().sum();
        let mut running = 0.0;
        let cdf = weights
            .iter()
            .map(|weight| {
                running += weight / sum;
                running
            })
            .collect();
        Ok(Self::Zipf(cdf))
    }

    pub fn pick<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        match self {
            Self::Uniform(keys) => rng.random_range(0..*keys),
            Self::Zipf(cdf) => {
                let u: f64 = rng.random();
                let index = cdf.partition_point(|&p| p <= u);
                index.min(cdf.len().saturating_sub(1)) as u64
            }
        }
    }
}

/// Builds requests from the templates.
#[derive(Debug)]
pub struct Workload {
    pub domain: String,
    pub templates: Vec<DescriptorTemplate>,
    pub hits_addend: u32,
    pub keys: KeyPicker,
    pub bot_keys: u64,
}

impl Workload {
    /// A legitimate client's request.
    pub fn legit<R: Rng + ?Sized>(&self, rng: &mut R) -> RateLimitRequest {
        let key = self.keys.pick(rng).to_string();
        self.request(&key)
    }

    /// A bot's request (keys `bot0`…).
    pub fn bot<R: Rng + ?Sized>(&self, rng: &mut R) -> RateLimitRequest {
        let key = format!("bot{}", rng.random_range(0..self.bot_keys.max(1)));
        self.request(&key)
    }

    pub fn request(&self, key: &str) -> RateLimitRequest {
        let descriptors = self
            .templates
            .iter()
            .map(|template| RateLimitDescriptor {
                entries: template
                    .entries
                    .iter()
                    .map(|(entry_key, parts)| Entry {
                        key: entry_key.clone(),
                        value: parts
                            .iter()
                            .map(|part| match part {
                                Part::Text(text) => text.as_str(),
                                Part::Key => key,
                            })
                            .collect(),
                    })
                    .collect(),
                ..Default::default()
            })
            .collect();
        RateLimitRequest {
            domain: self.domain.clone(),
            descriptors,
            hits_addend: self.hits_addend,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::parse_descriptor;
    use rand::SeedableRng;

    #[test]
    fn substitutes_the_key() {
        let workload = Workload {
            domain: "edge".to_owned(),
            templates: vec![
                parse_descriptor("generic_key=api,client_id={key}").unwrap(),
                parse_descriptor("user={key}-{key}").unwrap(),
            ],
            hits_addend: 0,
            keys: KeyPicker::new(10, None).unwrap(),
            bot_keys: 5,
        };
        let request = workload.request("42");
        assert_eq!(request.domain, "edge");
        assert_eq!(request.descriptors.len(), 2);
        let first = &request.descriptors[0].entries;
        assert_eq!(
            (first[0].key.as_str(), first[0].value.as_str()),
            ("generic_key", "api")
        );
        assert_eq!(
            (first[1].key.as_str(), first[1].value.as_str()),
            ("client_id", "42")
        );
        assert_eq!(request.descriptors[1].entries[0].value, "42-42");
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let bot = workload.bot(&mut rng);
        assert!(bot.descriptors[0].entries[1].value.starts_with("bot"));
    }

    #[test]
    fn keys_stay_in_range_and_zipf_is_skewed() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let uniform = KeyPicker::new(100, None).unwrap();
        let zipf = KeyPicker::new(100, Some(1.0)).unwrap();
        let mut firsts = [0u32; 2];
        for _ in 0..10_000 {
            let u = uniform.pick(&mut rng);
            let z = zipf.pick(&mut rng);
            assert!(u < 100 && z < 100);
            firsts[0] += u32::from(u == 0);
            firsts[1] += u32::from(z == 0);
        }
        // Uniform: ~1% on key 0; Zipf(1) over 100 keys: ~19%.
        assert!(firsts[0] < 300, "{firsts:?}");
        assert!(firsts[1] > 1500, "{firsts:?}");
        assert!(KeyPicker::new(MAX_ZIPF_KEYS + 1, Some(1.0)).is_err());
    }
}
