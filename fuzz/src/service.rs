//! What the service targets share: the rules (fuzz/rules.yaml and the repository's config/),
//! a fresh limiter on the memory store for every input (so that an input's answers do not
//! depend on the inputs before it), and one request through a router, no socket.

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::Router;
use floodgate::core::ground::time::{ManualClock, Micros, MICROS_PER_SECOND};
use floodgate::core::policy::config::{load, LoadOptions, SourceFile};
use floodgate::core::policy::rules::RuleSet;
use floodgate::engine::limiter::{Limiter, LimiterSettings};
use floodgate::store::memory::MemoryStore;
use http_body_util::BodyExt as _;
use tower::ServiceExt as _;

/// The pushed signal an adaptive rule of fuzz/rules.yaml reads.
pub const SIGNAL: &str = "checkout_p95";

/// 2025-11-24, as the memory store's clock: decisions do not depend on when a target runs.
const NOW: Micros = 1_764_000_000 * MICROS_PER_SECOND;

/// More than any answer to a fuzzed request holds: a longer one is a finding too.
const MAX_ANSWER_BYTES: usize = 1 << 20;

const RULE_FILES: [(&str, &str); 6] = [
    ("fuzz.yaml", include_str!("../rules.yaml")),
    ("api.yaml", include_str!("../../config/api.yaml")),
    ("edge.yaml", include_str!("../../config/edge.yaml")),
    ("login.yaml", include_str!("../../config/login.yaml")),
    ("reports.yaml", include_str!("../../config/reports.yaml")),
    ("shop.yaml", include_str!("../../config/shop.yaml")),
];

fn rules() -> &'static RuleSet {
    static RULES: OnceLock<RuleSet> = OnceLock::new();
    RULES.get_or_init(|| {
        let files: Vec<SourceFile> = RULE_FILES
            .iter()
            .map(|(name, text)| SourceFile {
                name: (*name).to_owned(),
                text: (*text).to_owned(),
            })
            .collect();
        load(&files, &LoadOptions::default())
            .unwrap_or_else(|errors| panic!("the fuzz targets' rules do not load: {errors}"))
    })
}

/// A limiter on a fresh memory store with a clock that stands still.
pub fn limiter() -> Arc<Limiter<MemoryStore>> {
    let clock = Arc::new(ManualClock::new(NOW));
    let store = MemoryStore::new(10_000, clock);
    Arc::new(Limiter::new(
        rules().clone(),
        store,
        LimiterSettings::default(),
    ))
}

/// Runs `future` to completion on this thread's runtime.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|error| panic!("cannot build a tokio runtime: {error}"));
    }
    RUNTIME.with(|runtime| runtime.block_on(future))
}

/// An answer, read whole.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    /// gRPC's status when it comes after the body.
    pub trailers: Option<HeaderMap>,
}

impl Answer {
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `request` through `router`, its answer read whole.
pub async fn send(router: &Router, request: Request<Body>) -> Answer {
    let response = match router.clone().oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let (parts, body) = response.into_parts();
    let collected = match body.collect().await {
        Ok(collected) => collected,
        Err(error) => panic!("the answer's body failed: {error}"),
    };
    let trailers = collected.trailers().cloned();
    let body = collected.to_bytes().to_vec();
    assert!(
        body.len() <= MAX_ANSWER_BYTES,
        "an answer of {} bytes",
        body.len()
    );
    Answer {
        status: parts.status,
        headers: parts.headers,
        body,
        trailers,
    }
}
