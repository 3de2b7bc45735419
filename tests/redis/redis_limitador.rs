//! Limitador's limits with their counters in Redis: `GET /counters/{namespace}` lists them as
//! it lists the memory store's (same JSON, found by `SCAN` a page at a time, one namespace's
//! only); and when Redis stops, every Limitador-format call fails as Limitador's do (HTTP 500,
//! gRPC `UNAVAILABLE`), behind the store's circuit breaker, and recovers when Redis returns. On
//! a cluster, each namespace is listed from the master that holds it.

use std::sync::Arc;
use std::time::Duration;

use floodgate::core::arithmetic::held_window::HoldBounds;
use floodgate::engine::limitador::expression::Bindings;
use floodgate::engine::limitador::{limits_file, Limitador};
use floodgate::engine::limiter::{Limiter, LimiterSettings};
use floodgate::engine::shutdown;
use floodgate::proto::kuadrant::service::ratelimit::v1::rate_limit_service_client::RateLimitServiceClient;
use floodgate::proto::kuadrant::service::ratelimit::v1::ReserveRequest;
use floodgate::proto::rate_limit_response::Code;
use floodgate::server::Operations;
use floodgate::store::held_windows::memory::MemoryHeldWindows;
use floodgate::store::held_windows::HeldWindows;
use floodgate::store::memory::MemoryStore;
use floodgate_testkit::descriptor;
use floodgate_testkit::http::{request, HttpResponse};
use floodgate_testkit::in_process::{serve_limiter_with, Served};
use floodgate_testkit::redis::{RedisCluster, RedisServer};
use serde_json::Value;
use tokio::net::TcpListener;

/// Two namespaces whose Redis hash tags are the same (`a_b`: the tag keeps letters, digits,
/// `.`, `_` and `-`), so the listing must tell them apart by the counters' own keys.
const LIMITS: &str = r#"
- namespace: a b
  max_value: 5
  seconds: 60
  name: per-user
  conditions: []
  variables:
  - descriptors[0].user
- namespace: a_b
  max_value: 5
  seconds: 60
  conditions: []
  variables:
  - descriptors[0].user
"#;

/// More counters than one `SCAN` page looks at, so the listing follows the cursor.
const USERS: usize = 700;

fn limitador(counters: Arc<dyn HeldWindows>) -> Arc<Limitador> {
    let limits = limits_file::parse(LIMITS, "limits.yaml")
        .unwrap_or_else(|error| panic!("test limits do not load: {error}"));
    Arc::new(Limitador::new(limits, counters, HoldBounds::default()))
}

fn user(name: &str) -> Bindings {
    Bindings::descriptors(vec![[("user".to_owned(), name.to_owned())].into()])
}

/// Limitador's HTTP API and floodgate's gRPC port (with Kuadrant's service) for `limitador`,
/// on free ports: (HTTP port, gRPC URL, what stops each).
async fn serve(limitador: Arc<Limitador>) -> (u16, String, [shutdown::ShutdownTrigger; 2]) {
    let http = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|error| panic!("bind: {error}"));
    let http_port = http.local_addr().map(|a| a.port()).unwrap_or(0);
    let clock = Arc::new(floodgate::core::ground::time::SystemClock);
    let no_rules = Limiter::new(
        floodgate::core::policy::rules::RuleSet::default(),
        MemoryStore::new(100, clock),
        LimiterSettings::default(),
    );
    let operations = Operations {
        limitador: Some(Arc::clone(&limitador)),
        ..Operations::default()
    };
    let Served { url, trigger, .. } = serve_limiter_with(Arc::new(no_rules), operations).await;
    let (http_trigger, http_shutdown) = shutdown::channel();
    tokio::spawn(floodgate::server::limitador_http::serve(
        http,
        limitador,
        Operations::default().connections,
        http_shutdown,
    ));
    (http_port, url, [trigger, http_trigger])
}

async fn call(port: u16, method: &'static str, path: &str, body: &str) -> HttpResponse {
    let (path, body) = (path.to_owned(), body.to_owned());
    let sent = tokio::task::spawn_blocking(move || request(port, method, &path, &[], &body)).await;
    match sent {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => panic!("{method}: {error}"),
        Err(error) => panic!("{method}: {error}"),
    }
}

/// `GET /counters/{namespace}` as JSON, each counter without its seconds left (the two stores'
/// clocks are not one), in a stable order.
async fn counters(port: u16, namespace: &str) -> Vec<Value> {
    let path = format!("/counters/{}", namespace.replace(' ', "%20"));
    let response = call(port, "GET", &path, "").await;
    assert_eq!(response.status, 200, "{path}: {}", response.body);
    let listed: Vec<Value> = serde_json::from_str(&response.body)
        .unwrap_or_else(|error| panic!("{path} is not a JSON list ({error}): {}", response.body));
    let mut listed: Vec<Value> = listed
        .into_iter()
        .map(|mut counter| {
            let left = counter
                .as_object_mut()
                .and_then(|fields| fields.remove("expires_in_seconds"));
            assert!(
                left.as_ref()
                    .and_then(Value::as_u64)
                    .is_some_and(|seconds| seconds <= 60),
                "{counter}: seconds left {left:?}"
            );
            counter
        })
        .collect();
    listed.sort_by_key(Value::to_string);
    listed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lists_a_namespace_s_counters_as_memory_does() {
    let redis_server = RedisServer::start();
    let in_redis = limitador(Arc::new(redis_server.store(None).await));
    let in_memory = limitador(Arc::new(MemoryHeldWindows::default()));
    for limitador in [&in_redis, &in_memory] {
        for n in 0..USERS {
            let hits = 1 + (n % 4) as u64;
            for namespace in ["a b", "a_b"] {
                let reported = limitador.report(namespace, user(&format!("u{n}")), hits);
                reported
                    .await
                    .unwrap_or_else(|error| panic!("report: {error}"));
            }
        }
    }
    let (redis_port, _, redis_stop) = serve(in_redis).await;
    let (memory_port, _, memory_stop) = serve(in_memory).await;
    let from_redis = counters(redis_port, "a b").await;
    assert_eq!(
        from_redis.len(),
        USERS,
        "one counter per user, of `a b` only"
    );
    assert_eq!(from_redis, counters(memory_port, "a b").await);
    assert!(
        from_redis[0].to_string().contains(r#""name":"per-user""#),
        "{}",
        from_redis[0]
    );
    assert!(counters(redis_port, "nowhere").await.is_empty());
    redis_stop
        .iter()
        .chain(&memory_stop)
        .for_each(|trigger| trigger.fire());
}

/// Calls until one fails with `reason` in its message, at most `calls` times.
async fn fails_with(limitador: &Limitador, reason: &str, calls: usize) -> bool {
    for _ in 0..calls {
        let checked = limitador.check("a b", user("ann"), 1, true).await;
        if checked.is_err_and(|error| error.to_string().contains(reason)) {
            return true;
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_fails_limitador_calls_as_unavailable_then_they_recover() {
    let mut redis_server = RedisServer::start();
    let mut options = redis_server.options(None);
    options.timeout = Duration::from_millis(500);
    let store = floodgate::store::redis::RedisStore::connect(&options)
        .await
        .unwrap_or_else(|error| panic!("cannot connect the store: {error}"));
    let limitador = limitador(Arc::new(store));
    let (port, grpc_url, stop) = serve(Arc::clone(&limitador)).await;
    let ann = r#"{"namespace": "a b", "values": {"user": "ann"}, "delta": 1}"#;
    assert_eq!(
        call(port, "POST", "/check_and_report", ann).await.status,
        200
    );

    redis_server.kill();
    assert_eq!(call(port, "POST", "/check", ann).await.status, 500);
    assert_eq!(call(port, "GET", "/counters/a%20b", "").await.status, 500);
    let mut kuadrant = RateLimitServiceClient::connect(grpc_url)
        .await
        .unwrap_or_else(|error| panic!("connect: {error}"));
    let reserve = ReserveRequest {
        domain: "a b".into(),
        descriptors: vec![descriptor(&[("user", "ann")])],
        amount: 1,
        ttl: None,
    };
    let refused = kuadrant.reserve(reserve.clone()).await;
    assert_eq!(
        refused.map(drop).map_err(|status| status.code()),
        Err(tonic::Code::Unavailable)
    );
    // Failures in a row open the store's circuit: Redis is no longer called.
    assert!(fails_with(&limitador, "circuit open", 20).await);

    redis_server.restart();
    let recovered = async {
        while limitador.check("a b", user("ann"), 1, false).await.is_err() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let waited = tokio::time::timeout(Duration::from_secs(20), recovered).await;
    assert!(
        waited.is_ok(),
        "Limitador's calls did not recover with Redis"
    );
    let reserved = kuadrant.reserve(reserve).await.map(|r| r.into_inner().code);
    assert_eq!(
        reserved.ok(),
        Some(Code::Ok as i32),
        "Reserve is answered OK again"
    );
    stop.iter().for_each(|trigger| trigger.fire());
}

/// On a cluster a namespace's counters live on the master of its hash tag's slot: the listing
/// asks that master, whichever it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_lists_each_namespace_from_the_master_that_holds_it() {
    const MASTERS: usize = 3;
    let cluster = RedisCluster::start(MASTERS);
    // One namespace per master, chosen by where its hash tag lands.
    let mut namespaces: Vec<(String, usize)> = Vec::new();
    for n in 0..1_000 {
        let namespace = format!("ns{n}");
        let owner = cluster.owner_of(cluster.slot_of(&format!("{{{namespace}}}")));
        if namespaces.iter().all(|(_, known)| *known != owner) {
            namespaces.push((namespace, owner));
        }
        if namespaces.len() == MASTERS {
            break;
        }
    }
    assert_eq!(namespaces.len(), MASTERS, "no namespace for some master");
    let limits: String = namespaces
        .iter()
        .map(|(namespace, _)| {
            format!(
                "- namespace: {namespace}\n  max_value: 9\n  seconds: 60\n  \
                 variables: ['descriptors[0].user']\n"
            )
        })
        .collect();
    let limits = limits_file::parse(&limits, "limits.yaml")
        .unwrap_or_else(|error| panic!("test limits do not load: {error}"));
    let mut options = cluster.options(None);
    options.timeout = Duration::from_secs(2);
    let store = floodgate::store::redis::RedisStore::connect(&options)
        .await
        .unwrap_or_else(|error| panic!("cannot connect to the cluster: {error}"));
    let limitador = Limitador::new(limits, Arc::new(store), HoldBounds::default());
    for (users, (namespace, _)) in namespaces.iter().enumerate() {
        for n in 0..=users {
            let reported = limitador.report(namespace, user(&format!("u{n}")), 2);
            reported
                .await
                .unwrap_or_else(|error| panic!("report: {error}"));
        }
    }
    for (users, (namespace, owner)) in namespaces.iter().enumerate() {
        let listed = limitador
            .counters(namespace)
            .await
            .unwrap_or_else(|error| panic!("listing {namespace}: {error}"));
        let remaining: Vec<u64> = listed.iter().map(|counter| counter.remaining).collect();
        assert_eq!(
            remaining,
            vec![7; users + 1],
            "{namespace}, on master {owner}: one counter per user, each at 2 of 9"
        );
    }
}
