//! `/status` and `/status.json` beside `/rlconfig`: every rule with its limit, its admitted and
//! refused hits over the last minute and ten minutes, and its heavy hitters
//! (`engine::heavy_hitters`, with `--heavy-hitters`); the store's health and the configuration
//! in force. The page is plain HTML, read without JavaScript; a small script reloads it every
//! 2 s.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};

use crate::core::arithmetic::heavy_hitters::HitterWindow;
use crate::core::ground::calendar::rfc3339;
use crate::core::policy::describe::window_text;
use crate::core::policy::rules::Rule;
use crate::engine::heavy_hitters::{shown, HitterBoard, RuleHitters, Sharing};
use crate::engine::limiter::Limiter;
use crate::engine::reload::ReloadStatus;
use crate::server::health::Health;
use crate::store::Store;

struct StatusSources<S> {
    limiter: Arc<Limiter<S>>,
    reload: Option<Arc<ReloadStatus>>,
    health: Health,
}

/// `/status` and `/status.json`.
pub fn routes<S: Store>(
    limiter: Arc<Limiter<S>>,
    reload: Option<Arc<ReloadStatus>>,
    health: Health,
) -> Router {
    Router::new()
        .route("/status", get(page::<S>))
        .route("/status.json", get(status_json::<S>))
        .with_state(Arc::new(StatusSources {
            limiter,
            reload,
            health,
        }))
}

async fn status_json<S: Store>(State(sources): State<Arc<StatusSources<S>>>) -> impl IntoResponse {
    let mut body = status(&sources).to_string();
    body.push('\n');
    ([(header::CONTENT_TYPE, "application/json")], body)
}

async fn page<S: Store>(State(sources): State<Arc<StatusSources<S>>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        html(&status(&sources)),
    )
}

/// Everything the page shows, as `/status.json` gives it.
fn status<S: Store>(sources: &StatusSources<S>) -> Value {
    let limiter = &sources.limiter;
    let board = limiter.heavy_hitters();
    let rules: Vec<Value> = limiter
        .rules()
        .domains()
        .flat_map(|domain| {
            domain
                .rules()
                .map(|rule| rule_status(rule, board))
                .collect::<Vec<_>>()
        })
        .collect();
    json!({
        "configuration": sources.reload.as_ref().map(|reload| reload.snapshot().to_string()),
        "store": {
            "backend": limiter.store().backend(),
            "reachable": sources.health.store_reachable(),
        },
        "heavy_hitters": hitters_scope(board.map(Arc::as_ref)),
        "rules": rules,
    })
}

/// Whether heavy hitters are counted, in how much memory, and whose are shown.
fn hitters_scope(board: Option<&HitterBoard>) -> Value {
    let Some(board) = board else {
        return json!({ "enabled": false, "bytes": 0 });
    };
    let (sharing, peers) = board.sharing();
    let reason = match &sharing {
        Sharing::Unreachable(reason) => Some(reason.clone()),
        Sharing::Local | Sharing::Shared => None,
    };
    json!({
        "enabled": true,
        "bytes": board.bytes(),
        "scope": sharing.name(),
        "instances": 1 + peers,
        "unreachable": reason,
    })
}

fn rule_status(rule: &Rule, board: Option<&Arc<HitterBoard>>) -> Value {
    let limits: Vec<String> = rule
        .limits
        .iter()
        .map(|quota| {
            format!(
                "{}/{} {}",
                quota.requests_per_unit,
                window_text(quota),
                quota.algorithm
            )
        })
        .collect();
    let window = |window| board.and_then(|board| board.rule(&rule.path, window));
    json!({
        "rule": rule.path,
        "limits": limits,
        "ban": rule.ban.is_some(),
        "banned": board.filter(|_| rule.ban.is_some()).map(|board| bans_json(board, &rule.path)),
        "values": rule.hitter_values.name(),
        "last_minute": window(HitterWindow::LastMinute).map(|hitters| hitters_json(&hitters)),
        "last_ten_minutes": window(HitterWindow::LastTenMinutes).map(|hitters| hitters_json(&hitters)),
    })
}

/// The values `path` bans now, ending last first: each with its ban's end and level.
fn bans_json(board: &HitterBoard, path: &str) -> Value {
    let now = board.now();
    let bans: Vec<Value> = board
        .bans(path)
        .iter()
        .map(|ban| {
            let until = UNIX_EPOCH + Duration::from_micros(u64::try_from(ban.until).unwrap_or(0));
            json!({
                "value": ban.shown(),
                "until": rfc3339(until),
                "ends_in_seconds": (ban.until - now) as f64 / 1e6,
                "level": ban.level,
            })
        })
        .collect();
    Value::Array(bans)
}

fn hitters_json(hitters: &RuleHitters) -> Value {
    let top: Vec<Value> = hitters
        .top
        .iter()
        .map(|hitter| {
            json!({
                "value": shown(hitter),
                "admitted": hitter.admitted,
                "refused": hitter.refused,
                "error": hitter.error,
            })
        })
        .collect();
    let minutes: Vec<Value> = hitters
        .per_minute
        .iter()
        .map(|(admitted, refused)| json!({ "admitted": admitted, "refused": refused }))
        .collect();
    json!({
        "admitted": hitters.admitted,
        "refused": hitters.refused,
        "top": top,
        "error_bound": hitters.error_bound,
        "per_minute": minutes,
    })
}

/// Reloads the page every 2 s (the browser keeps the scroll position); the page reads the
/// same without it.
const REFRESH: &str = "<script>setTimeout(function(){location.reload()},2000)</script>";

const STYLE: &str = "<style>body{font:14px system-ui,sans-serif;margin:1.5em}\
table{border-collapse:collapse;margin:.3em 0 1.2em}td,th{border:1px solid #ccc;\
padding:2px 8px;text-align:left}th{background:#eee}.refused{color:#b00}\
.spark{font-family:monospace;letter-spacing:1px}</style>";

/// The status as an HTML page.
fn html(status: &Value) -> String {
    let mut page = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>floodgate status</title>\
         {STYLE}</head><body><h1>floodgate</h1><p>configuration: {}<br>store: {} ({})<br>\
         heavy hitters: {}</p>",
        escape(
            status["configuration"]
                .as_str()
                .unwrap_or("from files, no reload status")
        ),
        escape(status["store"]["backend"].as_str().unwrap_or("")),
        if status["store"]["reachable"].as_bool().unwrap_or(false) {
            "reachable"
        } else {
            "UNREACHABLE"
        },
        escape(&hitters_text(&status["heavy_hitters"])),
    );
    for rule in status["rules"].as_array().into_iter().flatten() {
        rule_html(&mut page, rule);
    }
    page.push_str(REFRESH);
    page.push_str("</body></html>\n");
    page
}

/// Whether heavy hitters are counted, and whose.
fn hitters_text(hitters: &Value) -> String {
    if !hitters["enabled"].as_bool().unwrap_or(false) {
        return "off (--heavy-hitters)".to_owned();
    }
    let instances = hitters["instances"].as_u64().unwrap_or(1);
    match hitters["unreachable"].as_str() {
        Some(reason) => format!("this instance's only, Redis unreachable: {reason}"),
        None if hitters["scope"] == "all instances" => {
            format!("merged over {instances} instances")
        }
        None => "this instance's".to_owned(),
    }
}

fn rule_html(page: &mut String, rule: &Value) {
    let limits: Vec<&str> = rule["limits"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let _ = write!(
        page,
        "<h2>{}</h2><p>{}{}</p>",
        escape(rule["rule"].as_str().unwrap_or("")),
        escape(&limits.join(", ")),
        if rule["ban"].as_bool().unwrap_or(false) {
            " · bans"
        } else {
            ""
        }
    );
    let minute = &rule["last_minute"];
    let ten = &rule["last_ten_minutes"];
    let _ = write!(
        page,
        "<p>last minute: {} admitted, <span class=\"refused\">{} refused</span> · last 10 \
         minutes: {} admitted, <span class=\"refused\">{} refused</span></p>",
        minute["admitted"].as_u64().unwrap_or(0),
        minute["refused"].as_u64().unwrap_or(0),
        ten["admitted"].as_u64().unwrap_or(0),
        ten["refused"].as_u64().unwrap_or(0),
    );
    let minutes: Vec<&Value> = ten["per_minute"].as_array().into_iter().flatten().collect();
    let series = |field: &str| {
        minutes
            .iter()
            .map(|m| m[field].as_u64().unwrap_or(0))
            .collect::<Vec<_>>()
    };
    let _ = write!(
        page,
        "<p class=\"spark\">last 10 minutes, a character a minute: admitted {} · \
         <span class=\"refused\">refused {}</span></p>",
        sparkline(&series("admitted")),
        sparkline(&series("refused")),
    );
    bans_html(page, rule);
    let top = ten["top"].as_array().into_iter().flatten();
    let rows: String = top
        .map(|hitter| {
            format!(
                "<tr><td>{}</td><td>{}</td><td class=\"refused\">{}</td><td>+{}</td></tr>",
                escape(hitter["value"].as_str().unwrap_or("")),
                hitter["admitted"],
                hitter["refused"],
                hitter["error"],
            )
        })
        .collect();
    if !rows.is_empty() {
        let _ = write!(
            page,
            "<table><tr><th>value (last 10 minutes)</th><th>admitted</th><th>refused</th>\
             <th>hits not counted, at most</th></tr>{rows}</table><p>no value's hits exceed \
             what is shown by more than {}, nor had a value not shown more</p>",
            ten["error_bound"].as_u64().unwrap_or(0)
        );
    }
}

/// The rule's banned values, if it bans and any is.
fn bans_html(page: &mut String, rule: &Value) {
    let rows: String = rule["banned"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|ban| {
            format!(
                "<tr><td>{}</td><td>{}</td><td>{:.0}</td><td>{}</td></tr>",
                escape(ban["value"].as_str().unwrap_or("")),
                escape(ban["until"].as_str().unwrap_or("")),
                ban["ends_in_seconds"].as_f64().unwrap_or(0.0),
                ban["level"],
            )
        })
        .collect();
    if !rows.is_empty() {
        let _ = write!(
            page,
            "<table><tr><th>banned value</th><th>until</th><th>seconds left</th>\
             <th>level</th></tr>{rows}</table>"
        );
    }
}

/// `counts` as block characters, the largest full height (a blank for none).
fn sparkline(counts: &[u64]) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let top = counts.iter().copied().max().unwrap_or(0).max(1);
    counts
        .iter()
        .map(|&count| match count {
            0 => '·',
            count => {
                let level = (count * 7).div_ceil(top);
                BLOCKS[usize::try_from(level).unwrap_or(7).min(7)]
            }
        })
        .collect()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
