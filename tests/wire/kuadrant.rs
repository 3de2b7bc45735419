//! Limitador's limits over a real socket: kuadrant.service.ratelimit.v1 (CheckRateLimit,
//! Report, Reserve, Commit) and Envoy's ShouldRateLimit for a domain that is a Limitador
//! namespace, beside YAML rules, on the server from the library on port 0; and the limits file
//! reloaded when it changes.

use std::sync::Arc;
use std::time::Duration;

use floodgate::core::arithmetic::held_window::HoldBounds;
use floodgate::core::policy::config::{load, LoadOptions, SourceFile};
use floodgate::engine::limitador::{follow, limits_file, Limitador};
use floodgate::engine::limiter::{Limiter, LimiterSettings};
use floodgate::engine::shutdown;
use floodgate::proto::kuadrant::service::ratelimit::v1::rate_limit_service_client::RateLimitServiceClient as KuadrantClient;
use floodgate::proto::kuadrant::service::ratelimit::v1::{CommitRequest, ReserveRequest};
use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::RateLimitRequest;
use floodgate::server::Operations;
use floodgate::store::held_windows::memory::MemoryHeldWindows;
use floodgate::store::memory::MemoryStore;
use floodgate_testkit::{descriptor, rls};

use floodgate_testkit::in_process::{serve_limiter_with, Served};
use tonic::transport::Channel;

const LIMITS: &str = r#"
- namespace: llm
  max_value: 10
  seconds: 60
  name: tokens-per-user
  conditions:
  - "descriptors[0]['model'] == 'small'"
  variables:
  - descriptors[0].user
- namespace: api
  max_value: 2
  seconds: 60
  conditions: []
  variables:
  - descriptors[0].user
"#;

const RULES: &str = "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";

pub(crate) struct Server {
    pub(crate) url: String,
    kuadrant: KuadrantClient<Channel>,
    rls: rls::Client,
    pub(crate) trigger: shutdown::ShutdownTrigger,
}

pub(crate) async fn start() -> Server {
    let rules = load(
        &[SourceFile {
            name: "shop.yaml".into(),
            text: RULES.into(),
        }],
        &LoadOptions::default(),
    )
    .unwrap_or_else(|errors| panic!("test rules do not load: {errors}"));
    let clock = Arc::new(floodgate::core::ground::time::SystemClock);
    let limiter = Arc::new(Limiter::new(
        rules,
        MemoryStore::new(1000, clock),
        LimiterSettings::default(),
    ));
    let limits = limits_file::parse(LIMITS, "limits.yaml")
        .unwrap_or_else(|error| panic!("test limits do not load: {error}"));
    let limitador = Limitador::new(
        limits,
        Arc::new(MemoryHeldWindows::default()),
        HoldBounds::default(),
    );
    let operations = Operations {
        limitador: Some(Arc::new(limitador)),
        ..Operations::default()
    };
    let Served { url, trigger, .. } = serve_limiter_with(limiter, operations).await;
    let rls = rls::connect(&url).await;
    let kuadrant = KuadrantClient::new(rls_channel(&url).await);
    Server {
        url,
        kuadrant,
        rls,
        trigger,
    }
}

pub(crate) async fn rls_channel(url: &str) -> Channel {
    Channel::from_shared(url.to_owned())
        .unwrap_or_else(|error| panic!("bad url: {error}"))
        .timeout(rls::CALL_TIMEOUT)
        .connect()
        .await
        .unwrap_or_else(|error| panic!("connect: {error}"))
}

fn request(domain: &str, entries: &[(&str, &str)], hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![descriptor(entries)],
        hits_addend: hits,
    }
}

const ANN_SMALL: &[(&str, &str)] = &[("model", "small"), ("user", "ann")];

impl Server {
    async fn reserve_in(&mut self, domain: &str, amount: u64) -> (Code, String) {
        let answer = self
            .kuadrant
            .reserve(ReserveRequest {
                domain: domain.into(),
                descriptors: vec![descriptor(ANN_SMALL)],
                amount,
                ttl: None,
            })
            .await
            .unwrap_or_else(|status| panic!("Reserve failed: {status:?}"))
            .into_inner();
        let code = Code::try_from(answer.code).unwrap_or(Code::Unknown);
        (code, answer.reservation_id)
    }

    async fn reserve(&mut self, amount: u64) -> (Code, String) {
        self.reserve_in("llm", amount).await
    }

    async fn commit_in(&mut self, domain: &str, id: &str, actual: u64) -> bool {
        self.kuadrant
            .commit(CommitRequest {
                domain: domain.into(),
                descriptors: vec![descriptor(ANN_SMALL)],
                reservation_id: id.into(),
                actual_amount: actual,
            })
            .await
            .unwrap_or_else(|status| panic!("Commit failed: {status:?}"))
            .into_inner()
            .reservation_released
    }

    async fn commit(&mut self, id: &str, actual: u64) -> bool {
        self.commit_in("llm", id, actual).await
    }

    async fn check(&mut self, entries: &[(&str, &str)]) -> Code {
        let answer = self
            .kuadrant
            .check_rate_limit(request("llm", entries, 0))
            .await
            .unwrap_or_else(|status| panic!("CheckRateLimit failed: {status:?}"));
        Code::try_from(answer.into_inner().overall_code).unwrap_or(Code::Unknown)
    }

    async fn should_rate_limit(&mut self, domain: &str, user: &str) -> Code {
        let answer = rls::call(&mut self.rls, request(domain, &[("user", user)], 0))
            .await
            .unwrap_or_else(|status| panic!("ShouldRateLimit failed: {status:?}"));
        Code::try_from(answer.overall_code).unwrap_or(Code::Unknown)
    }
}

#[tokio::test]
async fn reservations_count_until_committed_and_commit_counts_the_actual_usage() {
    let mut server = start().await;
    let (code, first) = server.reserve(6).await;
    assert_eq!(code, Code::Ok);
    assert!(!first.is_empty(), "an admitted hold has an id");
    // 6 held of 10: another 6 would pass the limit while the first is outstanding.
    let (code, id) = server.reserve(6).await;
    assert_eq!((code, id.as_str()), (Code::OverLimit, ""));
    // The actual usage was 2: counted, and the hold released.
    assert!(server.commit(&first, 2).await);
    assert!(!server.commit(&first, 0).await, "a hold is released once");
    let (code, _) = server.reserve(8).await;
    assert_eq!(code, Code::Ok, "2 counted + 8 held = 10, within the limit");
    // CheckRateLimit ignores the holds, as Limitador's does: 2 counted, 1 more fits.
    assert_eq!(server.check(ANN_SMALL).await, Code::Ok);
    // A condition that does not hold: no limit matches.
    assert_eq!(
        server.check(&[("model", "large"), ("user", "ann")]).await,
        Code::Ok
    );
    server.trigger.fire();
}

/// Whether `id` has the shape of Limitador's reservation ids: a version-4 UUID, hyphenated.
fn is_uuid_v4(id: &str) -> bool {
    let groups: Vec<&str> = id.split('-').collect();
    let lengths: Vec<usize> = groups.iter().map(|group| group.len()).collect();
    lengths == [8, 4, 4, 4, 12]
        && id
            .chars()
            .all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        && groups[2].starts_with('4')
        && groups[3].starts_with(['8', '9', 'a', 'b'])
}

#[tokio::test]
async fn reserve_and_commit_answer_the_edges_as_limitador() {
    let mut server = start().await;
    // No domain: UNKNOWN and no id; a Commit without one counts nothing and is no error.
    assert_eq!(
        server.reserve_in("", 1).await,
        (Code::Unknown, String::new())
    );
    assert!(!server.commit_in("", "", 10).await);
    // Amount 0 is read as 0 (not hits_addend's "unset means 1"): admitted, nothing held.
    assert_eq!(server.reserve(0).await, (Code::Ok, String::new()));
    // No limit of the namespace matches: admitted, nothing held.
    assert_eq!(
        server.reserve_in("nowhere", 5).await,
        (Code::Ok, String::new())
    );
    // An unknown id: the usage still counts, nothing is released.
    assert!(!server.commit("no-such-hold", 4).await);
    let (code, id) = server.reserve(6).await;
    assert_eq!(code, Code::Ok, "4 counted + 6 = 10, within the limit");
    assert!(is_uuid_v4(&id), "{id:?} is not shaped as Limitador's ids");
    assert_eq!(server.reserve(0).await.0, Code::Ok, "4 + 6 held + 0 fits");
    server.trigger.fire();
}

#[tokio::test]
async fn report_counts_unconditionally() {
    let mut server = start().await;
    let report = server
        .kuadrant
        .report(request("llm", ANN_SMALL, 10))
        .await
        .unwrap_or_else(|status| panic!("Report failed: {status:?}"));
    assert_eq!(report.into_inner().overall_code, Code::Ok as i32);
    assert_eq!(server.check(ANN_SMALL).await, Code::OverLimit);
    let (code, _) = server.reserve(1).await;
    assert_eq!(code, Code::OverLimit);
    server.trigger.fire();
}

#[tokio::test]
async fn envoy_calls_for_a_limitador_namespace_answer_from_its_limits() {
    let mut server = start().await;
    assert_eq!(server.should_rate_limit("api", "ann").await, Code::Ok);
    assert_eq!(server.should_rate_limit("api", "ann").await, Code::Ok);
    assert_eq!(
        server.should_rate_limit("api", "ann").await,
        Code::OverLimit
    );
    assert_eq!(server.should_rate_limit("api", "bob").await, Code::Ok);
    // Another domain is the YAML rules' (one a minute).
    assert_eq!(server.should_rate_limit("shop", "ann").await, Code::Ok);
    assert_eq!(
        server.should_rate_limit("shop", "ann").await,
        Code::OverLimit
    );
    server.trigger.fire();
}

#[tokio::test]
async fn the_limits_file_is_reloaded_when_it_changes() {
    let dir = floodgate_testkit::tempdir();
    let path = dir.path().join("limits.yaml");
    let write = |text: &str| {
        std::fs::write(&path, text).unwrap_or_else(|error| panic!("write limits: {error}"))
    };
    write(LIMITS);
    let limitador = Arc::new(Limitador::new(
        limits_file::parse(LIMITS, "limits.yaml")
            .unwrap_or_else(|error| panic!("test limits do not load: {error}")),
        Arc::new(MemoryHeldWindows::default()),
        HoldBounds::default(),
    ));
    let (trigger, shutdown) = shutdown::channel();
    tokio::spawn(follow::follow(
        Arc::clone(&limitador),
        path.clone(),
        LIMITS.to_owned(),
        shutdown,
    ));
    // Most likely after the watch is set (else the first look after it sees the change).
    tokio::time::sleep(Duration::from_millis(200)).await;
    write("- namespace: chat\n  max_value: 5\n  seconds: 60\n  conditions: []\n  variables: []\n");
    let reloaded = async {
        while !limitador.has_namespace("chat") {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let waited = tokio::time::timeout(Duration::from_secs(10), reloaded).await;
    assert!(waited.is_ok(), "the new limits file was not put in force");
    assert!(!limitador.has_namespace("llm"));
    trigger.fire();
}
