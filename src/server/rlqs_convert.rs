//! RLQS messages to and from the engine's types: reports in, bucket actions out, with the
//! token buckets shaped as Envoy 1.40 reads them (whole seconds).

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action, QuotaAssignmentAction,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::{Duration as ProtoDuration, UInt32Value};

use crate::core::policy::rlqs::{Assignment, BucketKey};
use crate::engine::rlqs::{BucketReport, StreamAction};

/// The report's domain (empty after the first report of a stream) and its bucket usages.
pub fn reports_from_wire(report: RateLimitQuotaUsageReports) -> (String, Vec<BucketReport>) {
    let usages = report
        .bucket_quota_usages
        .into_iter()
        .map(|usage| BucketReport {
            bucket_id: usage.bucket_id.map(|id| id.bucket).unwrap_or_default(),
            allowed: usage.num_requests_allowed,
            denied: usage.num_requests_denied,
            elapsed_seconds: usage
                .time_elapsed
                .and_then(|elapsed| u64::try_from(elapsed.seconds).ok())
                .unwrap_or(0),
        })
        .collect();
    (report.domain, usages)
}

pub fn response_to_wire(actions: Vec<StreamAction>) -> RateLimitQuotaResponse {
    RateLimitQuotaResponse {
        bucket_action: actions.into_iter().map(action_to_wire).collect(),
    }
}

fn action_to_wire(action: StreamAction) -> BucketAction {
    match action {
        StreamAction::Abandon { bucket } => BucketAction {
            bucket_id: Some(bucket_id(&bucket)),
            bucket_action: Some(Action::AbandonAction(AbandonAction {})),
        },
        StreamAction::Assign {
            bucket,
            assignment,
            ttl,
        } => BucketAction {
            bucket_id: Some(bucket_id(&bucket)),
            bucket_action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
                assignment_time_to_live: Some(ProtoDuration {
                    seconds: i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX),
                    nanos: 0,
                }),
                rate_limit_strategy: Some(strategy(assignment)),
            })),
        },
    }
}

fn strategy(assignment: Assignment) -> RateLimitStrategy {
    let strategy = match assignment {
        Assignment::AllowAll => Strategy::BlanketRule(BlanketRule::AllowAll as i32),
        Assignment::DenyAll => Strategy::BlanketRule(BlanketRule::DenyAll as i32),
        Assignment::TokenBucket(shape) => Strategy::TokenBucket(TokenBucket {
            max_tokens: shape.max_tokens,
            tokens_per_fill: Some(UInt32Value {
                value: shape.tokens_per_fill,
            }),
            fill_interval: Some(ProtoDuration {
                seconds: i64::from(shape.fill_interval_seconds),
                nanos: 0,
            }),
        }),
    };
    RateLimitStrategy {
        strategy: Some(strategy),
    }
}

fn bucket_id(bucket: &BucketKey) -> BucketId {
    BucketId {
        bucket: bucket
            .entries()
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::rlqs::TokenBucketShape;
    use std::time::Duration;

    #[test]
    fn a_token_bucket_goes_out_in_whole_seconds_with_its_ttl() {
        let bucket = BucketKey::from_map(
            &[("name".to_owned(), "prod".to_owned())]
                .into_iter()
                .collect(),
            Default::default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let response = response_to_wire(vec![StreamAction::Assign {
            bucket: bucket.clone(),
            assignment: Assignment::TokenBucket(TokenBucketShape {
                max_tokens: 12,
                tokens_per_fill: 72,
                fill_interval_seconds: 10,
            }),
            ttl: Duration::from_millis(2500),
        }]);
        let action = &response.bucket_action[0];
        assert_eq!(action.bucket_id, Some(bucket_id(&bucket)));
        let Some(Action::QuotaAssignmentAction(assignment)) = action.bucket_action else {
            panic!("not an assignment: {action:?}");
        };
        assert_eq!(
            assignment.assignment_time_to_live.map(|d| d.seconds),
            Some(2)
        );
        let Some(Strategy::TokenBucket(bucket)) =
            assignment.rate_limit_strategy.and_then(|s| s.strategy)
        else {
            panic!("not a token bucket");
        };
        assert_eq!(bucket.max_tokens, 12);
        assert_eq!(bucket.tokens_per_fill.map(|v| v.value), Some(72));
        assert_eq!(
            bucket.fill_interval.map(|d| (d.seconds, d.nanos)),
            Some((10, 0))
        );
    }

    #[test]
    fn a_report_without_a_bucket_id_has_an_empty_one() {
        use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
        let (domain, usages) = reports_from_wire(RateLimitQuotaUsageReports {
            domain: "acme".to_owned(),
            bucket_quota_usages: vec![BucketQuotaUsage {
                bucket_id: None,
                time_elapsed: None,
                num_requests_allowed: 3,
                num_requests_denied: 4,
            }],
        });
        assert_eq!(domain, "acme");
        assert!(usages[0].bucket_id.is_empty());
        assert_eq!((usages[0].allowed, usages[0].denied), (3, 4));
        assert_eq!(usages[0].elapsed_seconds, 0);
    }
}
