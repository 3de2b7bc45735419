//! floodgate as the clients of the reference's service and server tests see it: the real binary
//! (testkit's `Floodgate`) on free loopback ports, its rules in a directory it watches (so a test
//! reloads by writing a file, as the reference's config provider sends an update), a gRPC client,
//! health over gRPC and HTTP, and the metrics the reference's stats correspond to.

use std::path::PathBuf;
use std::time::Duration;

use floodgate::proto::rate_limit_response::{rate_limit::Unit, Code, DescriptorStatus};
use floodgate::proto::{RateLimitRequest, RateLimitResponse};
use floodgate_testkit::prom::{scrape, Scrape};
use floodgate_testkit::{
    ops, ratelimit_command, rls, subdir, tempdir, wait_for_port, Floodgate, Running,
};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// The store flags of a floodgate that counts in memory.
pub const MEMORY: &[&str] = &["--store", "memory"];

/// How long a reload, a health change or a reconnection may take on a busy test machine.
pub const WITHIN: Duration = Duration::from_secs(10);

/// The file, in the watched rules directory, that holds the rules.
const RULES_FILE: &str = "config.yaml";

/// How the binary is started: `floodgate serve`, or under the reference's name, `ratelimit`
/// (the image's `/bin/ratelimit`), which answers as the reference does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    Serve,
    Ratelimit,
}

/// Both doors, `floodgate serve` first.
pub const BOTH_DOORS: [Door; 2] = [Door::Serve, Door::Ratelimit];

/// A running floodgate and a client connected to it.
pub struct Served {
    pub floodgate: Floodgate,
    /// Where the rules directory and the log are; removed when dropped.
    _dir: tempfile::TempDir,
    rules_dir: PathBuf,
    runtime: tokio::runtime::Runtime,
    client: rls::Client,
}

impl Served {
    /// `floodgate serve --config <dir>/rules` plus `flags` and `env`, the rules directory holding
    /// `rules` (or nothing), ready on every port.
    pub fn start(rules: Option<&str>, flags: &[&str], env: &[(&str, &str)]) -> Served {
        let dir = tempdir();
        let rules_dir = subdir(dir.path(), "rules");
        if let Some(text) = rules {
            ops::write_atomically(&rules_dir.join(RULES_FILE), text.as_bytes());
        }
        let floodgate = Floodgate::start_with_env(&rules_dir, flags, env, dir.path());
        Served::around(floodgate, dir, rules_dir)
    }

    /// [`Served::start`] through `door`.
    pub fn start_at(
        door: Door,
        rules: Option<&str>,
        flags: &[&str],
        env: &[(&str, &str)],
    ) -> Served {
        match door {
            Door::Serve => Served::start(rules, flags, env),
            Door::Ratelimit => Served::at_the_door(rules, flags, env),
        }
    }

    /// Started as `ratelimit` with the reference's environment (its rules in
    /// `RUNTIME_ROOT/config/`, no statsd to send to) plus `flags` and `env`.
    pub fn at_the_door(rules: Option<&str>, flags: &[&str], env: &[(&str, &str)]) -> Served {
        let dir = tempdir();
        let rules_dir = subdir(dir.path(), "config");
        if let Some(text) = rules {
            ops::write_atomically(&rules_dir.join(RULES_FILE), text.as_bytes());
        }
        let (mut command, (grpc_port, http_port, debug_port)) = ratelimit_command(dir.path());
        command
            .args(flags)
            .env("LOG_LEVEL", "debug")
            .env("USE_STATSD", "false")
            .envs(env.iter().copied());
        let process = Running::spawn("ratelimit", &mut command, dir.path());
        let floodgate = Floodgate {
            process,
            grpc_port,
            http_port,
            debug_port,
        };
        Served::around(floodgate, dir, rules_dir)
    }

    /// A floodgate started some other way, whose rules are in `rules_dir`.
    pub fn around(floodgate: Floodgate, dir: tempfile::TempDir, rules_dir: PathBuf) -> Served {
        for (port, what) in [
            (floodgate.grpc_port, "floodgate gRPC"),
            (floodgate.http_port, "floodgate HTTP"),
            (floodgate.debug_port, "floodgate debug"),
        ] {
            wait_for_port(port, WITHIN, what);
        }
        let runtime = ops::runtime();
        let client = runtime.block_on(rls::connect(&floodgate.grpc_url()));
        Served {
            floodgate,
            _dir: dir,
            rules_dir,
            runtime,
            client,
        }
    }

    pub fn call(&mut self, request: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        self.runtime.block_on(rls::call(&mut self.client, request))
    }

    /// The error a call must end with.
    pub fn refused(&mut self, request: RateLimitRequest) -> tonic::Status {
        match self.call(request) {
            Ok(answer) => panic!("the call should fail, but was answered {answer:?}"),
            Err(status) => status,
        }
    }

    /// The answer to a request for `domain` with one descriptor per entry list.
    pub fn answer(&mut self, domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitResponse {
        let request = rls::request(domain, descriptors);
        self.call(request.clone())
            .unwrap_or_else(|status| panic!("{request:?} failed: {status:?}"))
    }

    /// Spends `hits` of the limit of one descriptor, one call each, every one admitted: how a
    /// test brings a counter to the state the reference's mocked cache reports.
    pub fn spend(&mut self, hits: u32, domain: &str, entries: &[(&str, &str)]) {
        for hit in 1..=hits {
            let response = self.answer(domain, &[entries]);
            assert_eq!(overall(&response), Code::Ok, "hit {hit} of {entries:?}");
        }
    }

    pub fn metrics(&self) -> Scrape {
        scrape(self.floodgate.debug_port)
    }

    /// The grpc.health.v1 status of `service` (`None`: no answer).
    pub fn health(&self, service: &str) -> Option<ServingStatus> {
        self.runtime.block_on(async {
            let channel = tonic::transport::Channel::from_shared(self.floodgate.grpc_url())
                .ok()?
                .connect()
                .await
                .ok()?;
            let answer = HealthClient::new(channel)
                .check(HealthCheckRequest {
                    service: service.to_owned(),
                })
                .await
                .ok()?;
            ServingStatus::try_from(answer.into_inner().status).ok()
        })
    }

    /// Waits until the gRPC health of `service` is `status`, or fails the test.
    pub fn health_becomes(&self, service: &str, status: ServingStatus) {
        ops::wait_for(WITHIN, &format!("health of {service:?} {status:?}"), || {
            self.health(service) == Some(status)
        });
    }

    /// The status code of `GET /healthcheck` (0: no answer).
    pub fn healthcheck(&self) -> u16 {
        floodgate_testkit::http::get(self.floodgate.http_port, "/healthcheck", &[])
            .map_or(0, |response| response.status)
    }

    /// Waits until `GET /healthcheck` answers `status`, or fails the test.
    pub fn healthcheck_becomes(&self, status: u16) {
        ops::wait_for(WITHIN, &format!("/healthcheck {status}"), || {
            self.healthcheck() == status
        });
    }

    /// Replaces the rules (`None`: the directory is left empty) and waits until floodgate has
    /// reloaded, successfully or not.
    pub fn reload(&self, rules: Option<&str>) {
        let before = self.reload_count();
        let file = self.rules_dir.join(RULES_FILE);
        match rules {
            Some(text) => ops::write_atomically(&file, text.as_bytes()),
            None => std::fs::remove_file(&file)
                .unwrap_or_else(|error| panic!("remove {}: {error}", file.display())),
        }
        ops::wait_for(WITHIN, "a reload", || self.reload_count() != before);
    }

    /// (config version, reloads refused), as the debug port's headers say.
    fn reload_count(&self) -> Option<(u64, u64)> {
        ops::reload_headers(self.floodgate.debug_port)
    }
}

pub fn code(status: &DescriptorStatus) -> Code {
    Code::try_from(status.code).unwrap_or(Code::Unknown)
}

pub fn overall(response: &RateLimitResponse) -> Code {
    Code::try_from(response.overall_code).unwrap_or(Code::Unknown)
}

/// A status's limit: requests per unit, unit and name.
pub type Limit = (u32, Unit, String);

/// What the reference's tests compare of a status: its code, its limit and what remains.
pub type Status = (Code, Option<Limit>, u32);

pub fn status_of(status: &DescriptorStatus) -> Status {
    let limit = status.current_limit.as_ref().map(|limit| {
        (
            limit.requests_per_unit,
            Unit::try_from(limit.unit).unwrap_or(Unit::Unknown),
            limit.name.clone(),
        )
    });
    (code(status), limit, status.limit_remaining)
}

/// Every status of `response`, as [`status_of`] sees it.
pub fn statuses(response: &RateLimitResponse) -> Vec<Status> {
    response.statuses.iter().map(status_of).collect()
}

/// The value of a counter or gauge of the scrape, 0 when the series does not exist (yet): a
/// floodgate series is made at its first use, as the reference's counters start at 0.
pub fn counted(metrics: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    metrics.get(name, labels).unwrap_or(0.0)
}
