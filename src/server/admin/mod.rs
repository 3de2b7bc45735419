//! The admin listener (off unless `--admin-token-file`; `--admin-addr`, loopback by default):
//! authenticated changes at run time. Every route needs `Authorization: Bearer <token>`, the
//! token being a line of the token file; anything else gets 401 and no detail.
//!
//! * `POST /v1/overrides`: put a temporary limit on a rule (`core::policy::adjustment`), e.g. during an
//!   incident, without editing the configuration; `GET /v1/overrides` lists them with the time
//!   left; `DELETE /v1/overrides/{id}` ends one early. Each change is logged (target
//!   `floodgate::audit`) with the caller's address.
//!
//! * `POST /v1/counters/get` shows what the store holds for one descriptor's counters;
//!   `POST /v1/counters/reset` forgets them (`counters.rs`), logged as overrides are.
//!
//! Other modules add their routes to [`serve`]'s router (they get the same authentication).
//!
//! The token file is read again whenever its modification time, size or inode changes (a
//! Kubernetes Secret update swaps a symlink), so a rotated token works on the next request
//! without a restart. Several lines are several valid tokens, for a rotation without a gap.
//! A file that becomes empty or unreadable locks everyone out (logged) rather than leaving
//! the last token valid.

pub mod counters;
pub mod signals;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path as UrlPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::Router;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;

use crate::core::ground::calendar::rfc3339;
use crate::core::policy::request::Entry;
use crate::core::policy::rules::RuleSet;
use crate::engine::adjustment_set::OverrideRecord;
use crate::engine::limiter::Limiter;
use crate::engine::overrides::sync::SharedOverrides;
use crate::engine::overrides::{
    DeleteRefused, OverrideDesk, OverrideRequest, RuleChoice, SetOverride, SetRefused,
};
use crate::engine::shutdown::Shutdown;
use crate::server::connections::{ConnectionLimits, Listener};
use crate::store::Store;

/// The largest request body accepted.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// Why the admin API cannot start.
#[derive(Debug, thiserror::Error)]
pub enum AdminTokenError {
    #[error(
        "cannot read the admin token file {path}: {source} (--admin-token-file must name a \
         readable file holding the bearer token)"
    )]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the admin token file {path} holds no token: write one (e.g. `openssl rand -hex 32 > \
         {path}`), one token per line"
    )]
    Empty { path: PathBuf },
    #[error(
        "the admin token file {path} is writable by {who} (mode {mode:04o}): anyone who can write \
         it can give themselves a token; make it writable by its owner only (`chmod 600 {path}`, \
         or a Kubernetes Secret's defaultMode: 0400)"
    )]
    Writable {
        path: PathBuf,
        mode: u32,
        who: &'static str,
    },
}

/// What identifies one version of the token file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    #[cfg(unix)]
    inode: u64,
    /// A chmod changes no other field, and must be checked again.
    #[cfg(unix)]
    mode: u32,
}

impl FileStamp {
    fn of(metadata: &std::fs::Metadata) -> Self {
        Self {
            modified: metadata.modified().ok(),
            len: metadata.len(),
            #[cfg(unix)]
            inode: std::os::unix::fs::MetadataExt::ino(metadata),
            #[cfg(unix)]
            mode: std::os::unix::fs::MetadataExt::mode(metadata),
        }
    }
}

#[derive(Debug)]
struct TokenState {
    stamp: Option<FileStamp>,
    /// SHA-256 of each token: comparing digests takes the same time whatever the lengths.
    digests: Vec<[u8; 32]>,
}

/// The bearer tokens of `--admin-token-file`, re-read when the file changes.
#[derive(Debug)]
pub struct AdminToken {
    path: PathBuf,
    state: Mutex<TokenState>,
}

impl AdminToken {
    /// Reads the token file; a missing, unreadable or empty file is an error.
    pub fn load(path: &Path) -> Result<Self, AdminTokenError> {
        let (stamp, digests) = read_tokens(path)?;
        Ok(Self {
            path: path.to_owned(),
            state: Mutex::new(TokenState {
                stamp: Some(stamp),
                digests,
            }),
        })
    }

    /// Whether `presented` is one of the tokens, in time that does not depend on where it
    /// differs.
    pub fn accepts(&self, presented: &str) -> bool {
        self.refresh();
        let presented: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let state = self.state.lock();
        state.digests.iter().fold(0u8, |found, digest| {
            found | digest.ct_eq(&presented).unwrap_u8()
        }) == 1
    }

    /// Reads the file again if it changed. A stat per admin request: admin calls are rare.
    fn refresh(&self) {
        let stamp = std::fs::metadata(&self.path)
            .ok()
            .map(|metadata| FileStamp::of(&metadata));
        let mut state = self.state.lock();
        if stamp.is_some() && stamp == state.stamp {
            return;
        }
        match read_tokens(&self.path) {
            Ok((stamp, digests)) => {
                if state.stamp.is_some() {
                    tracing::info!(file = %self.path.display(), "admin token file changed: tokens re-read");
                }
                state.stamp = Some(stamp);
                state.digests = digests;
            }
            Err(error) => {
                if state.stamp.is_some() {
                    tracing::error!("{error}; every admin request is refused until it is fixed");
                }
                state.stamp = None;
                state.digests.clear();
            }
        }
    }
}

fn read_tokens(path: &Path) -> Result<(FileStamp, Vec<[u8; 32]>), AdminTokenError> {
    let unreadable = |source| AdminTokenError::Unreadable {
        path: path.to_owned(),
        source,
    };
    let metadata = std::fs::metadata(path).map_err(unreadable)?;
    check_permissions(path, &metadata)?;
    let text = std::fs::read_to_string(path).map_err(unreadable)?;
    let digests: Vec<[u8; 32]> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|token| Sha256::digest(token.as_bytes()).into())
        .collect();
    if digests.is_empty() {
        return Err(AdminTokenError::Empty {
            path: path.to_owned(),
        });
    }
    Ok((FileStamp::of(&metadata), digests))
}

/// A token file others may write is refused; one others may read is warned about (Kubernetes
/// mounts Secrets 0644 unless told otherwise, so refusing that would refuse most deployments).
fn check_permissions(path: &Path, metadata: &std::fs::Metadata) -> Result<(), AdminTokenError> {
    #[cfg(unix)]
    {
        let mode = std::os::unix::fs::MetadataExt::mode(metadata) & 0o7777;
        let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
            (true, true) => Some("its group and others"),
            (true, false) => Some("its group"),
            (false, true) => Some("others"),
            (false, false) => None,
        };
        if let Some(who) = who {
            return Err(AdminTokenError::Writable {
                path: path.to_owned(),
                mode,
                who,
            });
        }
        if mode & 0o004 != 0 {
            tracing::warn!(
                file = %path.display(),
                mode = format_args!("{mode:04o}"),
                "the admin token file is readable by every user of this machine: make it \
                 readable by its owner only (chmod 600, or a Kubernetes Secret's defaultMode: 0400)"
            );
        }
    }
    #[cfg(not(unix))]
    let _ = (path, metadata);
    Ok(())
}

/// Serves `routes` on `listener` until `shutdown`, every route behind the bearer token.
pub async fn serve(
    listener: TcpListener,
    token: Arc<AdminToken>,
    routes: Router,
    limits: ConnectionLimits,
    shutdown: Shutdown,
) {
    let app =
        with_fallback(routes).layer(axum::middleware::from_fn_with_state(token, authenticate));
    let listener = Listener {
        connect_info: true,
        ..super::http1_listener("admin", listener)
    };
    super::connections::serve(listener, app, limits, shutdown).await;
}

/// `routes`, and a JSON 404 for every other path.
pub fn with_fallback(routes: Router) -> Router {
    routes.fallback(|| async { json_error(StatusCode::NOT_FOUND, "no such admin endpoint") })
}

/// Logs where the admin API listens, with a warning when that is not loopback.
pub fn announce(addr: SocketAddr) {
    if addr.ip().is_loopback() {
        tracing::info!(admin = %addr, "admin API listening");
    } else {
        tracing::warn!(
            admin = %addr,
            "admin API listening beyond loopback: anyone who can reach it and holds the token \
             can change limits; prefer 127.0.0.1 and a port-forward or a sidecar"
        );
    }
}

async fn authenticate(
    State(token): State<Arc<AdminToken>>,
    request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            let (scheme, credentials) = value.split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| credentials.trim())
        });
    match presented {
        Some(presented) if token.accepts(presented) => next.run(request).await,
        // No detail: whether a header was there or which token was wrong helps only an attacker.
        _ => {
            let mut response = json_error(StatusCode::UNAUTHORIZED, "unauthorized");
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
            response
        }
    }
}

/// `{"error": message}` with `status`.
pub fn json_error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    json_response(status, &serde_json::json!({ "error": message.to_string() }))
}

/// `value` as a JSON answer with `status`.
pub fn json_response(status: StatusCode, value: &impl Serialize) -> Response {
    match serde_json::to_string_pretty(value) {
        Ok(mut body) => {
            body.push('\n');
            (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the answer: {error}\n"),
        )
            .into_response(),
    }
}

/// The caller's address for the audit log (`unknown` when the listener does not record it).
pub fn caller(extensions: &axum::http::Extensions) -> String {
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or_else(|| "unknown".to_owned(), |info| info.0.to_string())
}

/// `/v1/overrides` and `/v1/overrides/{id}`, for [`serve`].
pub fn override_routes<S: Store>(
    limiter: Arc<Limiter<S>>,
    shared: Option<Arc<SharedOverrides>>,
) -> Router {
    Router::new()
        .route(
            "/v1/overrides",
            get(list_overrides::<S>).post(create_override::<S>),
        )
        .route("/v1/overrides/{id}", delete(delete_override::<S>))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(Arc::new(OverrideDesk::new(limiter, shared)))
}

const EXAMPLE: &str = "{\"domain\": \"edge\", \"rule\": \"edge.generic_key_api\", \
                       \"requests_per_unit\": 5, \"ttl\": \"15m\", \"reason\": \"incident 42\"}";

const FIELDS: [&str; 7] = [
    "domain",
    "rule",
    "descriptor",
    "requests_per_unit",
    "unit",
    "ttl",
    "reason",
];

/// The body of `POST /v1/overrides`, field by field, so that every message names its field (a
/// derived parser names only a line and column).
fn decode_override(body: &[u8]) -> Result<OverrideRequest, String> {
    let value: Value = serde_json::from_slice(body).map_err(|error| {
        format!("the body is not JSON ({error}); send an object like {EXAMPLE}")
    })?;
    let Value::Object(fields) = value else {
        return Err(format!("the body must be a JSON object like {EXAMPLE}"));
    };
    if let Some(unknown) = fields.keys().find(|key| !FIELDS.contains(&key.as_str())) {
        return Err(format!(
            "{unknown}: unknown field; the fields are {}",
            FIELDS.join(", ")
        ));
    }
    let mut fields = BodyFields(fields);
    let domain = fields.text("domain", true)?.unwrap_or_default();
    let rule = fields.text("rule", false)?;
    let unit = fields.text("unit", false)?;
    let reason = fields.text("reason", true)?.unwrap_or_default();
    let requests_per_unit = fields.requests_per_unit()?;
    let ttl = fields.ttl()?;
    let descriptor = fields.descriptor()?;
    Ok(OverrideRequest {
        domain,
        rule: rule_choice(rule, descriptor)?,
        requests_per_unit,
        unit,
        ttl,
        reason,
    })
}

/// The fields of a body not decoded yet.
struct BodyFields(serde_json::Map<String, Value>);

impl BodyFields {
    fn text(&mut self, name: &str, required: bool) -> Result<Option<String>, String> {
        match self.0.remove(name) {
            Some(Value::String(text)) => Ok(Some(text)),
            None | Some(Value::Null) if !required => Ok(None),
            None | Some(Value::Null) => Err(format!("{name}: missing; e.g. {EXAMPLE}")),
            Some(other) => Err(format!("{name}: must be a string, not {other}")),
        }
    }

    fn requests_per_unit(&mut self) -> Result<u64, String> {
        match self.0.remove("requests_per_unit") {
            Some(Value::Number(number)) => number.as_u64().ok_or_else(|| {
                format!("requests_per_unit: must be a whole number, 0 or more, not {number}")
            }),
            None | Some(Value::Null) => {
                Err("requests_per_unit: missing; the limit to put in force, e.g. 5".to_owned())
            }
            Some(other) => Err(format!(
                "requests_per_unit: must be a whole number, 0 or more, not {other}"
            )),
        }
    }

    fn ttl(&mut self) -> Result<Duration, String> {
        match self.0.remove("ttl") {
            Some(Value::Null) | None => Err(
                "ttl: missing; how long the override lasts, e.g. \"15m\" (at most 24h)".to_owned(),
            ),
            Some(ttl) => parse_ttl(&ttl).map_err(|error| format!("ttl: {error}")),
        }
    }

    fn descriptor(&mut self) -> Result<Option<Vec<Entry>>, String> {
        match self.0.remove("descriptor") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(entries)) => entries
                .iter()
                .enumerate()
                .map(|(index, entry)| descriptor_entry(index, entry))
                .collect::<Result<Vec<Entry>, String>>()
                .map(Some),
            Some(other) => Err(format!(
                "descriptor: must be a list of {{\"key\": …, \"value\": …}}, not {other}"
            )),
        }
    }
}

/// The rule by its path or by descriptor entries that match it: one of them.
fn rule_choice(path: Option<String>, descriptor: Option<Vec<Entry>>) -> Result<RuleChoice, String> {
    match (path, descriptor) {
        (Some(path), None) => Ok(RuleChoice::Path(path)),
        (None, Some(entries)) => Ok(RuleChoice::Descriptor(entries)),
        (Some(_), Some(_)) => Err(
            "rule, descriptor: give one of them, not both (the rule's config path, or \
             descriptor entries that match it)"
                .to_owned(),
        ),
        (None, None) => Err(
            "rule: missing; give the rule's config path as /rlconfig shows it, or \
             `descriptor`: [{\"key\": …, \"value\": …}] entries that match it"
                .to_owned(),
        ),
    }
}

fn descriptor_entry(index: usize, entry: &Value) -> Result<Entry, String> {
    let field = |name: &str| match entry.get(name) {
        Some(Value::String(text)) => Ok(text.clone()),
        // An empty value is legal, as Envoy sends one for an empty header.
        None if name == "value" => Ok(String::new()),
        _ => Err(format!(
            "descriptor[{index}].{name}: must be a string; entries look like \
             {{\"key\": \"generic_key\", \"value\": \"api\"}}"
        )),
    };
    Ok(Entry::new(field("key")?, field("value")?))
}

/// An override as the API shows it.
#[derive(Debug, Serialize)]
struct OverrideView {
    id: String,
    domain: String,
    rule: String,
    requests_per_unit: u64,
    /// The unit of the overridden limit (absent when the rule is gone).
    #[serde(skip_serializing_if = "Option::is_none")]
    unit: Option<&'static str>,
    /// The configured limit it replaces (absent when the rule is gone).
    #[serde(skip_serializing_if = "Option::is_none")]
    configured_requests_per_unit: Option<u32>,
    reason: String,
    created_at: String,
    expires_at: String,
    expires_in_seconds: u64,
    status: &'static str,
}

const ACTIVE: &str = "active";
const INACTIVE: &str = "inactive: rule not in the current config";

impl OverrideView {
    fn of(record: &OverrideRecord, rules: &RuleSet, now_unix_ms: u64) -> Self {
        let configured = rules
            .domain(&record.domain)
            .and_then(|domain| domain.rule_by_path(&record.rule))
            .filter(|rule| !rule.unlimited)
            .and_then(|rule| rule.limits.get(record.limit_index));
        Self {
            id: record.id.clone(),
            domain: record.domain.clone(),
            rule: record.rule.clone(),
            requests_per_unit: record.requests_per_unit,
            unit: configured.map(|quota| quota.unit.name()),
            configured_requests_per_unit: configured.map(|quota| quota.requests_per_unit),
            reason: record.reason.clone(),
            created_at: unix_ms_rfc3339(record.created_at_unix_ms),
            expires_at: unix_ms_rfc3339(record.expires_at_unix_ms),
            expires_in_seconds: record
                .expires_at_unix_ms
                .saturating_sub(now_unix_ms)
                .div_ceil(1_000),
            status: if configured.is_some() {
                ACTIVE
            } else {
                INACTIVE
            },
        }
    }
}

fn unix_ms_rfc3339(unix_ms: u64) -> String {
    rfc3339(UNIX_EPOCH + Duration::from_millis(unix_ms))
}

async fn list_overrides<S: Store>(State(desk): State<Arc<OverrideDesk<S>>>) -> Response {
    let listing = desk.list();
    let overrides: Vec<OverrideView> = listing
        .overrides
        .iter()
        .map(|record| OverrideView::of(record, &listing.rules, listing.now_unix_ms))
        .collect();
    json_response(
        StatusCode::OK,
        &serde_json::json!({ "overrides": overrides }),
    )
}

async fn create_override<S: Store>(
    State(desk): State<Arc<OverrideDesk<S>>>,
    extensions: axum::http::Extensions,
    body: Bytes,
) -> Response {
    let request = match decode_override(&body) {
        Ok(request) => request,
        Err(message) => return json_error(StatusCode::BAD_REQUEST, message),
    };
    match desk.set(&request, &caller(&extensions)).await {
        Ok(set) => json_response(StatusCode::CREATED, &created_view(set)),
        Err(refused @ SetRefused::Invalid(_)) => json_error(StatusCode::BAD_REQUEST, refused),
        Err(refused @ SetRefused::NotShared(_)) => {
            json_error(StatusCode::SERVICE_UNAVAILABLE, refused)
        }
    }
}

/// The override set, as listed, and the id of the one it replaced.
fn created_view(set: SetOverride) -> Value {
    let now = set.record.created_at_unix_ms;
    let mut view =
        serde_json::to_value(OverrideView::of(&set.record, &set.rules, now)).unwrap_or(Value::Null);
    if let (Some(fields), Some(replaced)) = (view.as_object_mut(), set.replaced) {
        fields.insert("replaced".to_owned(), Value::String(replaced));
    }
    view
}

async fn delete_override<S: Store>(
    State(desk): State<Arc<OverrideDesk<S>>>,
    UrlPath(id): UrlPath<String>,
    extensions: axum::http::Extensions,
) -> Response {
    match desk.delete(&id, &caller(&extensions)).await {
        Ok(()) => json_response(StatusCode::OK, &serde_json::json!({ "deleted": id })),
        Err(refused @ DeleteRefused::NotFound(_)) => json_error(StatusCode::NOT_FOUND, refused),
        Err(refused @ DeleteRefused::NotShared(_)) => {
            json_error(StatusCode::SERVICE_UNAVAILABLE, refused)
        }
    }
}

/// `"90s"`, `"15m"`, `"2h"`, `"1500ms"` or a whole number of seconds (the engine checks its
/// bounds).
fn parse_ttl(value: &Value) -> Result<Duration, String> {
    const HOW: &str = "give a duration such as \"90s\", \"15m\" or \"2h\" (or seconds as a number)";
    let ttl = match value {
        Value::Number(number) => number
            .as_u64()
            .map(Duration::from_secs)
            .ok_or_else(|| format!("{number} is not a whole number of seconds; {HOW}"))?,
        Value::String(text) => {
            let text = text.trim();
            let split = text
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(text.len());
            let (digits, suffix) = text.split_at(split);
            let amount: u64 = digits
                .parse()
                .map_err(|_| format!("{text:?} is not a duration; {HOW}"))?;
            let millis = match suffix.trim() {
                "ms" => 1,
                "s" | "" => 1_000,
                "m" => 60_000,
                "h" => 3_600_000,
                _ => return Err(format!("{text:?} has an unknown unit; {HOW}")),
            };
            Duration::from_millis(amount.saturating_mul(millis))
        }
        other => return Err(format!("{other} is not a duration; {HOW}")),
    };
    Ok(ttl)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_their_units() {
        let ttl = |value: serde_json::Value| parse_ttl(&value);
        assert_eq!(ttl("90s".into()), Ok(Duration::from_secs(90)));
        assert_eq!(ttl("15m".into()), Ok(Duration::from_secs(900)));
        assert_eq!(ttl("2h".into()), Ok(Duration::from_secs(7_200)));
        assert_eq!(ttl("1500ms".into()), Ok(Duration::from_millis(1_500)));
        assert_eq!(ttl(30.into()), Ok(Duration::from_secs(30)));
        for bad in ["10d", "soon", ""] {
            assert!(ttl(bad.into()).is_err(), "{bad:?}");
        }
        assert!(ttl((-5).into()).is_err());
        assert!(ttl(Value::Null).is_err());
    }

    #[test]
    fn tokens_are_lines_of_the_file_and_a_changed_file_is_read_again() {
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
        let path = dir.path().join("token");
        let write = |text: &str| {
            std::fs::write(&path, text).unwrap_or_else(|error| panic!("{error}"));
        };
        write("first\n\n  second  \n");
        let token = AdminToken::load(&path).unwrap_or_else(|error| panic!("{error}"));
        assert!(token.accepts("first") && token.accepts("second"));
        assert!(!token.accepts("firs") && !token.accepts("") && !token.accepts("first\n"));
        // A different length: the stamp changes even within the same second.
        write("rotated-token\n");
        assert!(token.accepts("rotated-token") && !token.accepts("first"));
        write("");
        assert!(!token.accepts("rotated-token") && !token.accepts(""));
        assert!(matches!(
            AdminToken::load(&path),
            Err(AdminTokenError::Empty { .. })
        ));
        assert!(matches!(
            AdminToken::load(&dir.path().join("missing")),
            Err(AdminTokenError::Unreadable { .. })
        ));
    }

    #[cfg(unix)]
    #[test]
    fn a_token_file_others_may_write_is_refused_and_one_they_may_read_is_accepted() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
        let path = dir.path().join("token");
        std::fs::write(&path, "secret\n").unwrap_or_else(|error| panic!("{error}"));
        let chmod = |mode: u32| {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .unwrap_or_else(|error| panic!("{error}"));
        };
        for (mode, who) in [
            (0o620, "its group"),
            (0o602, "others"),
            (0o666, "its group and others"),
        ] {
            chmod(mode);
            match AdminToken::load(&path) {
                Err(AdminTokenError::Writable { who: found, .. }) => assert_eq!(found, who),
                other => panic!("mode {mode:o}: expected a refusal, got {other:?}"),
            }
        }
        for mode in [0o600, 0o400, 0o640, 0o644] {
            chmod(mode);
            assert!(AdminToken::load(&path).is_ok(), "mode {mode:o}");
        }
        // Made writable while serving: refused from the next request on.
        let token = AdminToken::load(&path).unwrap_or_else(|error| panic!("{error}"));
        assert!(token.accepts("secret"));
        chmod(0o646);
        assert!(!token.accepts("secret"));
        let message = AdminToken::load(&path)
            .map(|_| String::new())
            .unwrap_or_else(|error| error.to_string());
        assert!(message.contains("chmod 600"), "{message}");
    }
}
