//! "Protect the money path" end to end: a real Envoy 1.40 on `deploy/envoy/money-path.yaml` in
//! front of a tiny upstream, floodgate on `config/shop.yaml`. Mixed traffic beyond the shop's
//! shared capacity: the low routes (and a bot on /checkout) get 429 first while /login and
//! /checkout keep getting 200, then the normal routes, and the critical ones only once the whole
//! capacity is used. Every 429 carries Retry-After and the class.
//!
//! Clock-free: the test's copy of shop.yaml changes only the capacity, to a bucket of 20 per day
//! (one token back every 72 minutes), so no count can move while the test runs.

use std::path::Path;

use floodgate_testkit::envoy::Envoy;
use floodgate_testkit::http::{get, HttpResponse};
use floodgate_testkit::nginx::{replace_once, App};
use floodgate_testkit::prom::scrape;
use floodgate_testkit::{free_port, repo_file, tempdir, Floodgate};

/// The test's capacity: `requests_per_unit` (and so the bucket) of its copy of shop.yaml.
const CAPACITY: u32 = 20;

/// Seconds for one token to come back at 20 per day.
const TOKEN_SECONDS: u64 = 86_400 / CAPACITY as u64;

const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:140.0) Gecko/20100101 Firefox/140.0";
const BOT: &str = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Critical,
    Normal,
    Low,
}

impl Class {
    fn name(self) -> &'static str {
        match self {
            Self::Critical => "critical",
            Self::Normal => "normal",
            Self::Low => "low",
        }
    }

    /// Tokens the class must leave in the bucket, C − floor(C × share) with shop.yaml's
    /// shares (critical 100 %, normal 80 %, low 50 %).
    fn reserve(self) -> u32 {
        match self {
            Self::Critical => 0,
            Self::Normal => CAPACITY - CAPACITY * 80 / 100,
            Self::Low => CAPACITY - CAPACITY * 50 / 100,
        }
    }
}

/// One request of the shop's traffic, and the class money-path.yaml gives it.
#[derive(Debug, Clone, Copy)]
struct Visit {
    path: &'static str,
    agent: &'static str,
    class: Class,
}

/// One round of traffic: three low requests, one normal, two critical.
const ROUND: [Visit; 6] = [
    Visit {
        path: "/recommendations",
        agent: BROWSER,
        class: Class::Low,
    },
    Visit {
        path: "/reports/monthly",
        agent: BROWSER,
        class: Class::Low,
    },
    // A bot is low wherever it goes.
    Visit {
        path: "/checkout",
        agent: BOT,
        class: Class::Low,
    },
    Visit {
        path: "/cart",
        agent: BROWSER,
        class: Class::Normal,
    },
    Visit {
        path: "/login",
        agent: BROWSER,
        class: Class::Critical,
    },
    Visit {
        path: "/checkout/pay",
        agent: BROWSER,
        class: Class::Critical,
    },
];

/// Rounds sent: 36 requests for a capacity of 20; the last round finds the bucket empty.
const ROUNDS: usize = 6;

fn read(relative: &str) -> String {
    std::fs::read_to_string(repo_file(relative))
        .unwrap_or_else(|error| panic!("cannot read {relative}: {error}"))
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text)
        .unwrap_or_else(|error| panic!("cannot write {}: {error}", path.display()));
}

/// config/shop.yaml with only its capacity changed: 20 per day instead of 200 per second.
fn clock_free_rules() -> String {
    replace_once(
        &read("config/shop.yaml"),
        "unit: second\n      requests_per_unit: 200\n",
        &format!("unit: day\n      requests_per_unit: {CAPACITY}\n"),
    )
}

/// Envoy on money-path.yaml, its ports moved to free ones, floodgate at `rls_port` and the
/// shop application at `app_port`.
fn start_envoy(rls_port: u16, app_port: u16, dir: &Path) -> Envoy {
    let (listener, admin) = (free_port(), free_port());
    let mut bootstrap = read("deploy/envoy/money-path.yaml");
    for (from, to) in [
        ("port_value: 10000", listener),
        ("port_value: 9901", admin),
        ("port_value: 8081", rls_port),
        ("port_value: 8082", app_port),
    ] {
        bootstrap = replace_once(&bootstrap, from, &format!("port_value: {to}"));
    }
    // An error from floodgate must show as a 500 here, never as a silent 200.
    bootstrap = replace_once(
        &bootstrap,
        "failure_mode_deny: false",
        "failure_mode_deny: true",
    );
    Envoy::start(&bootstrap, "money-path.yaml", dir, &[listener])
}

/// What a request got, beside what the bucket should have said.
struct Outcome {
    visit: Visit,
    /// Tokens left before the request, by the arithmetic of shop.yaml's classes.
    tokens_before: u32,
    expected_admit: bool,
    response: HttpResponse,
}

impl Outcome {
    fn admitted(&self) -> bool {
        self.response.status == 200
    }

    fn line(&self, index: usize) -> String {
        format!(
            "#{index:<2} {:<8} {:<18} {:<8} tokens {:>2} expected {} got {} {}",
            self.visit.class.name(),
            self.visit.path,
            if self.visit.agent == BOT {
                "bot"
            } else {
                "browser"
            },
            self.tokens_before,
            if self.expected_admit { 200 } else { 429 },
            self.response.status,
            self.response
                .header("x-floodgate-priority")
                .unwrap_or_default(),
        )
    }
}

fn first_refusal(outcomes: &[Outcome], class: Class) -> usize {
    outcomes
        .iter()
        .position(|outcome| outcome.visit.class == class && !outcome.admitted())
        .unwrap_or_else(|| panic!("{} was never refused", class.name()))
}

fn retry_after(response: &HttpResponse) -> u64 {
    response
        .header("retry-after")
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After in seconds on a 429: {response:?}"))
}

/// The priority header a refusal of `class` carries, with `tokens` left in the bucket.
fn expected_priority_header(class: Class, tokens: u32) -> String {
    let reason = if tokens == 0 { "full" } else { "reserved" };
    let reserved_for = match class {
        Class::Low => ";reserved-for=\"normal critical\"",
        Class::Normal => ";reserved-for=\"critical\"",
        Class::Critical => "",
    };
    format!("{};reason={reason}{reserved_for}", class.name())
}

#[test]
fn low_is_shed_first_and_critical_keeps_the_whole_capacity() {
    let dir = tempdir();
    let config = dir.path().join("shop.yaml");
    write(&config, &clock_free_rules());
    let floodgate = Floodgate::start(&config, &["--response-headers", "ietf"], dir.path());
    let app = App::start();
    let envoy = start_envoy(floodgate.grpc_port, app.port, dir.path());

    let mut tokens = CAPACITY;
    let mut outcomes = Vec::new();
    for visit in ROUND.iter().cycle().take(ROUND.len() * ROUNDS) {
        let response = get(envoy.port, visit.path, &[("user-agent", visit.agent)])
            .unwrap_or_else(|error| panic!("request through Envoy failed: {error}"));
        let expected_admit = tokens > visit.class.reserve();
        outcomes.push(Outcome {
            visit: *visit,
            tokens_before: tokens,
            expected_admit,
            response,
        });
        if expected_admit {
            tokens -= 1;
        }
    }
    let listing = outcomes
        .iter()
        .enumerate()
        .map(|(index, outcome)| outcome.line(index))
        .collect::<Vec<_>>()
        .join("\n");
    let context = || {
        format!(
            "{listing}\nfloodgate log:\n{}",
            floodgate.process.log_text()
        )
    };

    // Each answer is the class arithmetic's, request by request.
    for outcome in &outcomes {
        let status = outcome.response.status;
        assert!(status == 200 || status == 429, "{}", context());
        assert_eq!(outcome.admitted(), outcome.expected_admit, "{}", context());
    }

    // The story the numbers tell: low first, normal next, critical only once all is used.
    let low = first_refusal(&outcomes, Class::Low);
    let normal = first_refusal(&outcomes, Class::Normal);
    let critical = first_refusal(&outcomes, Class::Critical);
    assert!(low < normal && normal < critical, "{}", context());
    assert!(
        outcomes[..critical]
            .iter()
            .filter(|outcome| outcome.visit.class == Class::Critical)
            .all(Outcome::admitted),
        "critical refused before its first refusal?\n{}",
        context()
    );
    let admitted_before_critical_refusal = outcomes[..critical]
        .iter()
        .filter(|outcome| outcome.admitted())
        .count();
    assert_eq!(
        admitted_before_critical_refusal,
        CAPACITY as usize,
        "critical is refused only when the whole capacity is used\n{}",
        context()
    );
    let low_admitted = outcomes[..low]
        .iter()
        .filter(|outcome| outcome.admitted())
        .count();
    assert!(
        low_admitted >= CAPACITY as usize / 2,
        "low is refused only once half of the capacity is used\n{}",
        context()
    );

    // Every admitted request reached the application; every refusal says who and until when.
    for outcome in &outcomes {
        let response = &outcome.response;
        if outcome.admitted() {
            assert!(response.body.starts_with("app:"), "{response:?}");
            continue;
        }
        assert_eq!(response.header("x-envoy-ratelimited"), Some("true"));
        assert_eq!(
            response.header("x-floodgate-priority"),
            Some(expected_priority_header(outcome.visit.class, outcome.tokens_before).as_str()),
            "{}",
            context()
        );
        assert!(retry_after(response) >= 1, "{response:?}");
    }

    // The last round finds the bucket empty: each class waits until its hit fits above its
    // reserve, so low waits longest.
    let last_round = &outcomes[outcomes.len() - ROUND.len()..];
    let wait = |class: Class| {
        last_round
            .iter()
            .find(|outcome| outcome.visit.class == class)
            .map(|outcome| retry_after(&outcome.response))
            .unwrap_or_else(|| panic!("no {} in the last round", class.name()))
    };
    let (low_wait, normal_wait, critical_wait) =
        (wait(Class::Low), wait(Class::Normal), wait(Class::Critical));
    assert!(
        (1..=TOKEN_SECONDS).contains(&critical_wait),
        "critical waits for one token: {critical_wait} s"
    );
    assert!(
        low_wait > normal_wait && normal_wait > critical_wait,
        "low {low_wait} s, normal {normal_wait} s, critical {critical_wait} s"
    );

    // The rejection counter says the same, per class.
    let scrape = scrape(floodgate.debug_port);
    for class in [Class::Critical, Class::Normal, Class::Low] {
        let refused = outcomes
            .iter()
            .filter(|outcome| outcome.visit.class == class && !outcome.admitted())
            .count();
        let counted = scrape.value(
            "floodgate_requests_rejected_total",
            &[
                ("domain", "shop"),
                ("rule", "shop.pool_shop"),
                ("reason", "limit"),
                ("class", class.name()),
            ],
        );
        assert_eq!(counted, refused as f64, "{}", class.name());
    }
}
