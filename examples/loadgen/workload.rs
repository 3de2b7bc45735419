//! What is sent: keys drawn uniformly or by Zipf, substituted into the descriptor templates;
//! with a `--mix`, each request's class too, by a deterministic interleaving of the weights.

use std::sync::atomic::{AtomicUsize, Ordering};

use floodgate::proto::rate_limit_descriptor::Entry;
use floodgate::proto::{RateLimitDescriptor, RateLimitRequest};
use rand::Rng;

use crate::cli::{DescriptorTemplate, MixClass, Part};

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

/// The classes of a `--mix` and the order they take turns in.
#[derive(Debug)]
pub struct Mix {
    pub classes: Vec<MixClass>,
    /// One round: class indexes, each as often as its weight, spread evenly (smooth weighted
    /// round robin), so any stretch of requests holds the mix, whatever the timing.
    order: Vec<usize>,
    next: AtomicUsize,
}

impl Mix {
    /// `None` without classes.
    pub fn new(classes: Vec<MixClass>) -> Option<Self> {
        if classes.is_empty() {
            return None;
        }
        let weights: Vec<i64> = classes.iter().map(|c| i64::from(c.weight)).collect();
        let total: i64 = weights.iter().sum();
        let mut current = vec![0_i64; weights.len()];
        let mut order = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
        for _ in 0..total {
            for (credit, weight) in current.iter_mut().zip(&weights) {
                *credit += weight;
            }
            // The first of the largest credits.
            let chosen = (1..current.len()).fold(0, |best, index| {
                if current[index] > current[best] {
                    index
                } else {
                    best
                }
            });
            current[chosen] -= total;
            order.push(chosen);
        }
        Some(Self {
            classes,
            order,
            next: AtomicUsize::new(0),
        })
    }

    /// The class of the next request.
    fn pick(&self) -> usize {
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        self.order[turn % self.order.len()]
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
    /// With `--mix`: legitimate requests take their descriptors from their class.
    pub mix: Option<Mix>,
}

impl Workload {
    /// A legitimate client's request, and its `--mix` class (an index into `mix.classes`).
    pub fn legit<R: Rng + ?Sized>(&self, rng: &mut R) -> (RateLimitRequest, Option<usize>) {
        let class = self.next_class();
        (self.legit_in(class, rng), class)
    }

    /// The `--mix` class of the next legitimate request (`None` without a mix).
    pub fn next_class(&self) -> Option<usize> {
        self.mix.as_ref().map(Mix::pick)
    }

    /// A legitimate request of `class` (from `next_class`).
    pub fn legit_in<R: Rng + ?Sized>(&self, class: Option<usize>, rng: &mut R) -> RateLimitRequest {
        let key = self.keys.pick(rng).to_string();
        let templates = match (&self.mix, class) {
            (Some(mix), Some(class)) => mix
                .classes
                .get(class)
                .map_or(&self.templates, |class| &class.descriptors),
            _ => &self.templates,
        };
        self.request_from(templates, &key)
    }

    /// A bot's request (keys `bot0`…).
    pub fn bot<R: Rng + ?Sized>(&self, rng: &mut R) -> RateLimitRequest {
        let key = format!("bot{}", rng.random_range(0..self.bot_keys.max(1)));
        self.request(&key)
    }

    pub fn request(&self, key: &str) -> RateLimitRequest {
        self.request_from(&self.templates, key)
    }

    fn request_from(&self, templates: &[DescriptorTemplate], key: &str) -> RateLimitRequest {
        let descriptors = templates
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
            mix: None,
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
    fn a_mix_interleaves_its_classes_by_weight() {
        let classes = [
            "critical:1:pool=shop,priority=critical",
            "low:2:pool=shop,priority=low",
        ]
        .iter()
        .map(|text| crate::cli::parse_mix_class(text).unwrap())
        .collect();
        let workload = Workload {
            domain: "shop".to_owned(),
            templates: vec![parse_descriptor("generic_key=api").unwrap()],
            hits_addend: 0,
            keys: KeyPicker::new(10, None).unwrap(),
            bot_keys: 5,
            mix: Mix::new(classes),
        };
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        let mut picked = Vec::new();
        for _ in 0..9 {
            let (request, class) = workload.legit(&mut rng);
            let class = class.unwrap();
            let priority = &request.descriptors[0].entries[1].value;
            assert_eq!(priority, ["critical", "low"][class]);
            picked.push(class);
        }
        // Every round of three: low, critical, low (never two criticals in a row).
        assert_eq!(picked, [1, 0, 1, 1, 0, 1, 1, 0, 1]);
        // Bots keep --descriptor.
        assert_eq!(
            workload.bot(&mut rng).descriptors[0].entries[0].value,
            "api"
        );
        assert!(Mix::new(Vec::new()).is_none());
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
