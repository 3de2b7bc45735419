//! What one Envoy is told to enforce on one bucket: allow all, deny all, or a token bucket
//! filled at its share of the rule's rate. Shaped for Envoy 1.40's filter, which reads only
//! whole seconds of `fill_interval` (a 500 ms interval would be 0 s: a division by zero) and
//! does not implement `requests_per_time_unit`.

use crate::policy::adjustment::Adjustment;
use crate::policy::rules::Rule;

/// What a bucket that meets no rule gets (`--rlqs-unmatched`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum UnmatchedBucket {
    #[default]
    AllowAll,
    DenyAll,
    /// `rule:NAME`: the limit of the rule with `name: NAME` in the bucket's domain, divided
    /// among the Envoys reporting that bucket as a matched rule's is (each unmatched bucket its
    /// own copy of the limit); allow-all in a domain without such a rule.
    Rule(std::sync::Arc<str>),
}

impl UnmatchedBucket {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "allow-all" => Some(Self::AllowAll),
            "deny-all" => Some(Self::DenyAll),
            _ => text
                .strip_prefix("rule:")
                .filter(|name| !name.trim().is_empty())
                .map(|name| Self::Rule(name.trim().into())),
        }
    }

    /// The rule an unmatched bucket of `domain` is held to, if this default names one there.
    pub fn default_rule<'d>(
        &self,
        domain: &'d crate::policy::rules::DomainRules,
    ) -> Option<&'d Rule> {
        let Self::Rule(name) = self else {
            return None;
        };
        domain
            .rules()
            .find(|rule| rule.name.as_deref() == Some(&**name))
    }

    /// What an unmatched bucket gets where no default rule applies.
    pub fn fallback(&self) -> Assignment {
        match self {
            Self::AllowAll | Self::Rule(_) => Assignment::AllowAll,
            Self::DenyAll => Assignment::DenyAll,
        }
    }
}

/// The part of a rule that RLQS divides: its rate and its burst.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BucketLimit {
    Unlimited,
    Limited {
        /// Requests per second of the rule's tightest limit.
        per_second: f64,
        /// Requests that may pass at once for the whole limit: the token bucket's capacity
        /// (`burst`), else the requests of one window.
        burst: f64,
    },
}

impl BucketLimit {
    /// The rule's tightest limit (the one with the lowest rate) as a rate and a burst.
    pub fn of_rule(rule: &Rule) -> Self {
        Self::of_adjusted_rule(rule, None)
    }

    /// [`BucketLimit::of_rule`] with `adjustment` (an operator's override or an adaptive
    /// value, `core::policy::adjustment`) applied first: the total divided is the limit in force.
    pub fn of_adjusted_rule(rule: &Rule, adjustment: Option<&Adjustment>) -> Self {
        if rule.unlimited {
            return Self::Unlimited;
        }
        let limits = match adjustment {
            Some(adjustment) => adjustment.apply(&rule.limits),
            None => rule.limits.clone(),
        };
        let tightest = limits
            .iter()
            .map(|quota| {
                let window = quota.window_seconds().max(1) as f64;
                let requests = f64::from(quota.requests_per_unit);
                let burst = quota
                    .burst
                    .filter(|_| {
                        quota.algorithm == crate::arithmetic::algorithm::Algorithm::TokenBucket
                    })
                    .map_or(requests, f64::from);
                (requests / window, burst)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0));
        match tightest {
            Some((per_second, burst)) => Self::Limited { per_second, burst },
            None => Self::Unlimited,
        }
    }
}

/// A token bucket as Envoy's `envoy.type.v3.TokenBucket` carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucketShape {
    pub max_tokens: u32,
    pub tokens_per_fill: u32,
    /// Whole seconds (Envoy 1.40 drops the fraction).
    pub fill_interval_seconds: u32,
}

impl TokenBucketShape {
    /// Requests per second it admits after its initial burst.
    pub fn rate(&self) -> f64 {
        f64::from(self.tokens_per_fill) / f64::from(self.fill_interval_seconds.max(1))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignment {
    AllowAll,
    DenyAll,
    TokenBucket(TokenBucketShape),
}

/// The longest fill interval: one token per hour is the slowest rate an assignment expresses.
const MAX_FILL_INTERVAL_SECONDS: u32 = 3_600;

/// The assignment of a share (`share` requests per second, from [`super::divide`]) of `limit`.
///
/// The rate is rounded down, never up, so the shares of all Envoys stay within the limit:
/// at or above 100/s the interval is 1 s (under by less than 1 %); below, 10 s (under by less
/// than 0.1/s); under 0.1/s, one token per interval as long as the share allows.
pub fn assign(limit: BucketLimit, share: f64) -> Assignment {
    let BucketLimit::Limited { per_second, burst } = limit else {
        return Assignment::AllowAll;
    };
    if !(share.is_finite() && share > 0.0 && per_second > 0.0) {
        return Assignment::DenyAll;
    }
    let (tokens_per_fill, fill_interval_seconds) = if share >= 100.0 {
        (share.floor(), 1.0)
    } else if share >= 0.1 {
        ((share * 10.0).floor(), 10.0)
    } else {
        (
            1.0,
            (1.0 / share)
                .ceil()
                .min(f64::from(MAX_FILL_INTERVAL_SECONDS)),
        )
    };
    let max_tokens = (burst * share / per_second).ceil().max(1.0);
    Assignment::TokenBucket(TokenBucketShape {
        max_tokens: saturating_u32(max_tokens),
        tokens_per_fill: saturating_u32(tokens_per_fill).max(1),
        fill_interval_seconds: saturating_u32(fill_interval_seconds).max(1),
    })
}

fn saturating_u32(value: f64) -> u32 {
    if value >= f64::from(u32::MAX) {
        u32::MAX
    } else if value > 0.0 {
        value as u32
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::config::load_valid;

    fn limited(per_second: f64, burst: f64) -> BucketLimit {
        BucketLimit::Limited { per_second, burst }
    }

    fn shape(assignment: Assignment) -> TokenBucketShape {
        match assignment {
            Assignment::TokenBucket(shape) => shape,
            other => panic!("not a token bucket: {other:?}"),
        }
    }

    #[test]
    fn shares_become_whole_second_token_buckets_rounded_down() {
        let high = shape(assign(limited(1000.0, 1000.0), 250.7));
        assert_eq!((high.tokens_per_fill, high.fill_interval_seconds), (250, 1));
        assert_eq!(high.max_tokens, 251);
        let mid = shape(assign(limited(20.0, 20.0), 7.25));
        assert_eq!((mid.tokens_per_fill, mid.fill_interval_seconds), (72, 10));
        assert!(mid.rate() <= 7.25);
        let slow = shape(assign(limited(1.0 / 60.0, 1.0), 0.004));
        assert_eq!((slow.tokens_per_fill, slow.fill_interval_seconds), (1, 250));
    }

    #[test]
    fn the_burst_is_the_share_of_the_rule_burst() {
        // 120 per minute shared in half: 60 tokens at most, 1/s.
        let half = shape(assign(limited(2.0, 120.0), 1.0));
        assert_eq!(half.max_tokens, 60);
        assert!((half.rate() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn no_share_denies_and_no_limit_allows() {
        assert_eq!(assign(limited(10.0, 10.0), 0.0), Assignment::DenyAll);
        assert_eq!(assign(limited(0.0, 0.0), 5.0), Assignment::DenyAll);
        assert_eq!(assign(BucketLimit::Unlimited, 0.0), Assignment::AllowAll);
    }

    #[test]
    fn a_rule_gives_its_tightest_rate_and_its_burst() {
        let rules = load_valid(
            "acme.yaml",
            "
domain: acme
descriptors:
  - key: name
    value: a
    rate_limits:
      - {unit: second, requests_per_unit: 50}
      - {unit: minute, requests_per_unit: 600}
  - key: name
    value: b
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 30}
  - key: name
    value: c
    rate_limit: {unlimited: true}
",
        );
        let rule = |path: &str| {
            rules
                .domain("acme")
                .and_then(|d| d.rule_by_path(path))
                .map(BucketLimit::of_rule)
        };
        assert_eq!(rule("acme.name_a"), Some(limited(10.0, 600.0)));
        assert_eq!(rule("acme.name_b"), Some(limited(10.0, 30.0)));
        assert_eq!(rule("acme.name_c"), Some(BucketLimit::Unlimited));
        let halved = crate::policy::adjustment::Adjustment {
            requests_per_unit: 5,
            limit_index: 1,
            source: crate::policy::adjustment::AdjustmentSource::Adaptive {
                signal: "latency".to_owned(),
            },
        };
        let adjusted = rules
            .domain("acme")
            .and_then(|d| d.rule_by_path("acme.name_b"))
            .map(|rule| BucketLimit::of_adjusted_rule(rule, Some(&halved)));
        // Index 1 is beyond name_b's one limit: nothing changes.
        assert_eq!(adjusted, Some(limited(10.0, 30.0)));
        let on_first = crate::policy::adjustment::Adjustment {
            limit_index: 0,
            ..halved
        };
        let adjusted = rules
            .domain("acme")
            .and_then(|d| d.rule_by_path("acme.name_b"))
            .map(|rule| BucketLimit::of_adjusted_rule(rule, Some(&on_first)));
        assert_eq!(adjusted, Some(limited(5.0, 15.0)));
    }
}
