//! LLM token budgets as Envoy AI Gateway runs them on Envoy Gateway, through real peers: Envoy
//! 1.40 with the routes and filter Envoy Gateway renders for a BackendTrafficPolicy whose rules
//! check before the request (`cost.request` 0: `hits_addend: 0`) and charge the tokens the
//! response used when the stream is done (`cost.response` from AI Gateway's
//! `io.envoy.ai_gateway` metadata: `apply_on_stream_done`), `deploy/envoy/envoy-gateway-token-budgets.yaml`;
//! the rules pushed over xDS by the project's ADS test server as Envoy Gateway's translator
//! renders them; floodgate started as `ratelimit` with Envoy Gateway's exact environment
//! (`floodgate_testkit::envoy_gateway`), counting in Redis (the door's default) or, with
//! `BACKEND_TYPE=memory`, in memory.
//!
//! What AI Gateway's end-to-end tests assert, envoyproxy/ratelimit's arithmetic: a check is over
//! only once the count is beyond the limit, and a charge is counted whatever it brings the count
//! to. On a budget of 10 000 tokens an hour, 20 tokens → 200, 10 000 → 200, then 1 → 429
//! (`tests/e2e/token_ratelimit_test.go`); calls of C tokens on a budget of N admit N/C + 1 calls,
//! and per-tenant budgets from Envoy's per-descriptor `limit` override (Envoy Gateway's
//! `limit.fromMetadata`) do the same, a budget of 0 admitting one call
//! (`tests/e2e/dynamic_metadata_ratelimit_test.go`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use floodgate_testkit::envoy::{deploy_bootstrap, Envoy};
use floodgate_testkit::envoy_gateway::{self, Certs, Peers, NODE};
use floodgate_testkit::http::get;
use floodgate_testkit::prom::scrape;
use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::xds::{rate_limit_config, XdsServer};
use floodgate_testkit::{free_port, subdir, tempdir, wait_for_port, Running};

/// The listener Envoy Gateway names after the Gateway's, and the domain of its rules.
const DOMAIN: &str = "default/eg/http";
/// The descriptor Envoy Gateway gives each route's rule (`getRouteDescriptor`).
const BUDGET_ROUTE: &str = "httproute/default/budget/rule/0/match/0/llm_example";
const TIERED_ROUTE: &str = "httproute/default/tiered/rule/0/match/0/llm_example";
/// The budget route's limit: tokens an hour per tenant.
const BUDGET: u64 = 10_000;
/// The tiered route's limit when the request brings no budget of its own.
const TIERED_FALLBACK: u32 = 4;

/// One wait: a process to listen, a rule set to be acknowledged, a charge to arrive.
const STEP: Duration = Duration::from_secs(20);

/// What a budget admitted, on the sequences AI Gateway's tests run.
#[derive(Debug, PartialEq, Eq)]
struct Budgets {
    /// 20 tokens, 10 000, then 1, on 10 000 an hour: each call's status.
    overshoot: Vec<u16>,
    /// Calls of 2 500 tokens admitted on 10 000 an hour.
    calls_of_2500: usize,
    /// Calls of 2 tokens admitted per tier, from the tenant's own budget (`limit` override).
    tiers: BTreeMap<&'static str, usize>,
}

/// envoyproxy/ratelimit's answers: 10 000 / 2 500 + 1 calls; premium 6 / 2 + 1, basic 2 / 2 +
/// 1, suspended 0 / 2 + 1, and a tier without metadata the rule's own 4 / 2 + 1.
fn the_references_answers() -> Budgets {
    Budgets {
        overshoot: vec![200, 200, 429],
        calls_of_2500: 5,
        tiers: BTreeMap::from([
            ("premium", 4),
            ("basic", 2),
            ("unknown", 3),
            ("suspended", 1),
        ]),
    }
}

#[test]
fn ai_gateways_token_budgets_hold_at_the_ratelimit_door_in_redis() {
    let redis = RedisServer::start();
    let mut gateway = Gateway::start(Some(redis.port()));
    assert_eq!(gateway.budgets("redis"), the_references_answers());
}

#[test]
fn ai_gateways_token_budgets_hold_at_the_ratelimit_door_in_memory() {
    let mut gateway = Gateway::start(None);
    assert_eq!(gateway.budgets("memory"), the_references_answers());
}

/// The two rules Envoy Gateway renders for the guide's BackendTrafficPolicies: per route, its
/// descriptor, then the `x-tenant-id` header's (`Distinct`: any value) with the limit.
fn envoy_gateway_rules() -> RateLimitConfig {
    let route = |name: &str, tokens_per_hour: u32| RateLimitDescriptor {
        key: name.to_owned(),
        value: name.to_owned(),
        descriptors: vec![RateLimitDescriptor {
            key: "rule-0-match-0".to_owned(),
            rate_limit: Some(RateLimitPolicy {
                unit: RateLimitUnit::Hour as i32,
                requests_per_unit: tokens_per_hour,
                ..RateLimitPolicy::default()
            }),
            ..RateLimitDescriptor::default()
        }],
        ..RateLimitDescriptor::default()
    };
    let budget = u32::try_from(BUDGET).unwrap_or(u32::MAX);
    RateLimitConfig {
        name: DOMAIN.to_owned(),
        domain: DOMAIN.to_owned(),
        descriptors: vec![
            route(BUDGET_ROUTE, budget),
            route(TIERED_ROUTE, TIERED_FALLBACK),
        ],
    }
}

/// Envoy in front of floodgate (as `ratelimit`), the xDS server feeding floodgate, and the
/// count of rate-limit calls floodgate has answered so far.
struct Gateway {
    envoy: Envoy,
    ratelimit: Running,
    debug_port: u16,
    /// Calls floodgate must have answered before the next request: every request is checked
    /// once, and a request that went upstream is charged once more after its response.
    calls_due: f64,
    _xds: XdsServer,
    _runtime: tokio::runtime::Runtime,
    /// Logs and certificates: removed last.
    _dir: tempfile::TempDir,
}

impl Gateway {
    /// Everything started and the rules acknowledged; `redis_port` as Envoy Gateway's
    /// `rateLimit.backend.redis.url`, or `None` for `BACKEND_TYPE=memory`.
    fn start(redis_port: Option<u16>) -> Gateway {
        let dir = tempdir();
        let certs = Certs::write(dir.path());
        let runtime = floodgate_testkit::runtime();
        let xds = runtime.block_on(XdsServer::start(Some(certs.xds_server_tls())));
        xds.set_snapshot(NODE, "1", vec![rate_limit_config(&envoy_gateway_rules())]);
        let peers = Peers {
            xds_port: xds.port(),
            redis_port,
            prometheus_port: free_port(),
        };
        let data = subdir(dir.path(), "data");
        let mut environment = envoy_gateway::environment(&data, &certs, &peers);
        if redis_port.is_none() {
            environment.push(("BACKEND_TYPE", "memory".to_owned()));
        }
        let (ratelimit, (grpc_port, _, debug_port)) =
            envoy_gateway::spawn(dir.path(), &environment);
        wait_for_port(grpc_port, STEP, "ratelimit gRPC");
        wait_for_port(debug_port, STEP, "ratelimit debug");
        runtime.block_on(xds.wait_for_request(STEP, |seen| seen.is_ack_of("1")));
        let envoy = start_envoy(grpc_port, &certs, dir.path());
        Gateway {
            envoy,
            ratelimit,
            debug_port,
            calls_due: 0.0,
            _xds: xds,
            _runtime: runtime,
            _dir: dir,
        }
    }

    /// AI Gateway's sequences, each tenant's name suffixed with `run` (fresh counters).
    fn budgets(&mut self, run: &str) -> Budgets {
        let tenant = |name: &str| format!("{name}-{run}");
        let overshoot = [20, 10_000, 1]
            .iter()
            .map(|&tokens| self.call("/v1/chat/completions", &tenant("overshoot"), None, tokens))
            .collect();
        let calls_of_2500 = self.admitted(
            "/v1/chat/completions",
            &tenant("steady"),
            None,
            2_500,
            BUDGET,
        );
        let tiers = ["premium", "basic", "unknown", "suspended"]
            .into_iter()
            .map(|tier| {
                let admitted = self.admitted("/v1/tiered/", &tenant(tier), Some(tier), 2, 6);
                (tier, admitted)
            })
            .collect();
        Budgets {
            overshoot,
            calls_of_2500,
            tiers,
        }
    }

    /// How many calls of `tokens` `tenant` makes before the first 429, stopping after
    /// `budget / tokens + 3` calls (a budget that never refuses must not run forever).
    fn admitted(
        &mut self,
        path: &str,
        tenant: &str,
        tier: Option<&str>,
        tokens: u64,
        budget: u64,
    ) -> usize {
        let most = budget / tokens + 3;
        let mut admitted = 0;
        for _ in 0..most {
            if self.call(path, tenant, tier, tokens) != 200 {
                break;
            }
            admitted += 1;
        }
        admitted
    }

    /// One completion for `tenant` (of `tier`) that uses `tokens`: its status, once floodgate
    /// has answered the rate-limit calls it causes.
    fn call(&mut self, path: &str, tenant: &str, tier: Option<&str>, tokens: u64) -> u16 {
        let tokens = tokens.to_string();
        let mut headers = vec![("x-tenant-id", tenant), ("x-tokens", tokens.as_str())];
        headers.extend(tier.map(|tier| ("x-tenant-tier", tier)));
        let response = get(self.envoy.port, path, &headers)
            .unwrap_or_else(|error| panic!("request through Envoy failed: {error}"));
        assert!(
            matches!(response.status, 200 | 429),
            "neither admitted nor refused (did floodgate answer?): {response:?}\n{}",
            self.ratelimit.log_text()
        );
        // The charge is sent when the stream is done, after the response: the next request
        // must find it counted.
        self.calls_due += if response.status == 200 { 2.0 } else { 1.0 };
        self.wait_for_calls();
        response.status
    }

    fn wait_for_calls(&self) {
        let started = Instant::now();
        loop {
            let answered: f64 = scrape(self.debug_port)
                .all("floodgate_calls_total")
                .iter()
                .map(|sample| sample.value)
                .sum();
            if answered >= self.calls_due {
                return;
            }
            assert!(
                started.elapsed() < STEP,
                "floodgate answered {answered} rate-limit calls, {} due\n{}",
                self.calls_due,
                self.ratelimit.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Envoy on the guide's bootstrap, its ports moved to free ones and Envoy's TLS files to
/// `certs` (Envoy Gateway's `/certs`).
fn start_envoy(ratelimit_port: u16, certs: &Certs, dir: &Path) -> Envoy {
    let (bootstrap, listeners) = deploy_bootstrap(
        "deploy/envoy/envoy-gateway-token-budgets.yaml",
        ratelimit_port,
    );
    let bootstrap = bootstrap.replace("/certs/", &format!("{}/", certs.dir().display()));
    Envoy::start(&bootstrap, "envoy.yaml", dir, &listeners)
}
