//! Headless Chromium (Debian's `chromium`) for the status page's tests: a page rendered once
//! (`--dump-dom`, a screenshot), or kept open and read again as it changes by itself, through
//! the DevTools protocol over a pipe (`--remote-debugging-pipe`: JSON messages, each ended by a
//! NUL, read on fd 3 and written on fd 4), so no websocket client and no port are needed.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long one DevTools call may take, and a page to open.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);

const HEADLESS: [&str; 4] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
];

/// Debian's `chromium` (`$FLOODGATE_CHROMIUM` otherwise); missing, the test fails:
/// `scripts/install-peers.sh` installs it.
pub fn chromium_bin() -> PathBuf {
    if let Ok(path) = std::env::var("FLOODGATE_CHROMIUM") {
        return PathBuf::from(path);
    }
    crate::which("chromium").unwrap_or_else(|| {
        panic!("chromium not found: run scripts/install-peers.sh (or set FLOODGATE_CHROMIUM)")
    })
}

/// Runs headless Chromium on `url` with `args` (`--dump-dom`, `--screenshot=…`) until it
/// exits (60 s at most): its stdout.
pub fn run_once(url: &str, args: &[&str]) -> String {
    let profile = crate::tempdir();
    let mut command = Command::new(chromium_bin());
    command
        .args(HEADLESS)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--virtual-time-budget=1000", "--timeout=20000"])
        .args(args)
        .arg(url);
    let out = profile.path().join("stdout");
    let file = std::fs::File::create(&out).unwrap_or_else(|error| panic!("{error}"));
    let mut child = command
        .stdout(file)
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot run chromium: {error}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::read_to_string(&out).unwrap_or_default()
}

/// A page open in headless Chromium, read through the DevTools protocol; the browser is
/// killed (by pid) when dropped.
pub struct OpenPage {
    child: Child,
    to_browser: ChildStdin,
    from_browser: Receiver<Value>,
    session: String,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl OpenPage {
    /// Opens `url` and attaches to its tab.
    pub fn open(url: &str) -> OpenPage {
        let profile = crate::tempdir();
        // The shell hands the pipes to fds 3 and 4, where Chromium reads and writes the
        // protocol, and sets its own stdin and stdout aside; `exec` keeps one pid.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 </dev/null >/dev/null"#)
            .arg(chromium_bin())
            .args(HEADLESS)
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("--remote-debugging-pipe")
            .arg(url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot run chromium: {error}"));
        let (Some(to_browser), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            panic!("chromium's pipes were not made");
        };
        let (sender, from_browser) = mpsc::channel();
        std::thread::spawn(move || {
            for message in BufReader::new(stdout).split(0).map_while(Result::ok) {
                if let Ok(value) = serde_json::from_slice::<Value>(&message) {
                    if sender.send(value).is_err() {
                        return;
                    }
                }
            }
        });
        let mut page = OpenPage {
            child,
            to_browser,
            from_browser,
            session: String::new(),
            next_id: 0,
            _profile: profile,
        };
        page.session = page.attach(url);
        page
    }

    /// The session of the tab showing `url`, once the browser lists it.
    fn attach(&mut self, url: &str) -> String {
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let targets = self.call(None, "Target.getTargets", json!({}));
            let tab = targets["targetInfos"].as_array().and_then(|infos| {
                infos
                    .iter()
                    .find(|info| info["type"] == "page" && info["url"] == url)
                    .and_then(|info| info["targetId"].as_str().map(str::to_owned))
            });
            if let Some(target) = tab {
                let attached = self.call(
                    None,
                    "Target.attachToTarget",
                    json!({ "targetId": target, "flatten": true }),
                );
                if let Some(session) = attached["sessionId"].as_str() {
                    return session.to_owned();
                }
            }
            assert!(
                Instant::now() < deadline,
                "chromium never listed a tab at {url}: {targets}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The page's text as shown now (`document.body.innerText`); `None` while it has no body
    /// or is between two loads.
    pub fn text(&mut self) -> Option<String> {
        let session = self.session.clone();
        let answer = self.call(
            Some(&session),
            "Runtime.evaluate",
            json!({ "expression": "document.body ? document.body.innerText : null",
                    "returnByValue": true }),
        );
        answer["result"]["value"].as_str().map(str::to_owned)
    }

    /// One protocol call (on the tab's session, or the browser's): its result, or the error
    /// object as the value (a page between two loads answers with one).
    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        self.to_browser
            .write_all(&bytes)
            .and_then(|()| self.to_browser.flush())
            .unwrap_or_else(|error| panic!("cannot write to chromium: {error}"));
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.from_browser.recv_timeout(left) {
                Ok(answer) if answer["id"] == id => {
                    return answer.get("result").cloned().unwrap_or(answer);
                }
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => panic!("chromium did not answer {method}"),
                Err(RecvTimeoutError::Disconnected) => panic!("chromium exited during {method}"),
            }
        }
    }
}

impl Drop for OpenPage {
    /// Asks the browser to close (its helper processes go with it), killed if it has not
    /// within 5 s.
    fn drop(&mut self) {
        let _ = self
            .to_browser
            .write_all(b"{\"id\":0,\"method\":\"Browser.close\"}\0")
            .and_then(|()| self.to_browser.flush());
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
