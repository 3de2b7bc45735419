//! The documentation keeps its promises: every link in `README.md` and `docs/**/*.md` leads
//! somewhere, and every shell block is either run by a test or says it is only an illustration.
//! The conventions are written down in `docs/README.md` ("Conventions").
//!
//! - A relative link `[text](path)` or `[text](path#anchor)` must name a file or directory of
//!   this repository (not outside it), and its `#anchor`, when the target is Markdown, a heading
//!   of that file by GitHub's slug. A link `[text](#anchor)` is checked against its own file's
//!   headings. `http(s)://` links are not fetched (the tests run offline); their text only has to
//!   be a URL (no spaces).
//! - A fenced block whose info string starts with `sh`, `bash`, `shell` or `console` (or an
//!   unlabelled block whose first line is a `$ ` prompt) carries a mark after the language:
//!   - `illustrative`: not run;
//!   - `tested-by=<test fn>[,<test fn>…]`: test functions that exist under the crate's test and
//!     source trees;
//!   - `tested-by=examples_answer_as_shown`: run here against a floodgate started as the
//!     document's own `floodgate serve …` line says, on free loopback ports, each command's
//!     output compared with the `# ` lines below it;
//!   - `run`: run here without a server: each `$ ` line is a command (run by `sh` in the
//!     repository root, with the built `floodgate` first on the PATH) and the lines after it, up
//!     to the next `$ `, are its exact output.
//!
//! Every problem is reported with its file and line.

use std::collections::{BTreeMap, HashSet};
use std::net::TcpStream;
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The shell-like info strings whose blocks must carry a mark.
const SHELL_LANGUAGES: &[&str] = &["sh", "bash", "shell", "console"];

/// Where the functions named by `tested-by=` may live (those of them that exist).
const TEST_TREES: &[&str] = &["tests", "src", "core", "testkit", "examples", "benches"];

#[test]
fn every_link_in_readme_and_docs_resolves_and_every_shell_block_is_marked() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let documents = markdown_files(root);
    assert!(
        documents.iter().any(|path| path == Path::new("README.md")),
        "README.md not found under {}",
        root.display()
    );
    let tests = test_functions(root);
    let mut problems = Vec::new();
    let mut runnable = Vec::new();
    for relative in &documents {
        let text = read(&root.join(relative));
        let checked = check_document(root, relative, &text, &tests);
        problems.extend(checked.problems);
        runnable.extend(checked.runnable);
    }
    for block in &runnable {
        problems.extend(run_block(root, block));
    }
    assert!(
        problems.is_empty(),
        "{} problem(s) in the documentation (conventions: docs/README.md):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The checker itself: each kind of mistake is found and placed on its line.
#[test]
fn the_checker_reports_broken_links_anchors_and_unmarked_blocks() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let root = dir.path();
    std::fs::create_dir_all(root.join("docs")).unwrap_or_else(|error| panic!("mkdir: {error}"));
    std::fs::write(
        root.join("docs/guide.md"),
        "# The guide\n\n## Why did this get that limit? `check --explain`\n\n## Same\n\n## Same\n",
    )
    .unwrap_or_else(|error| panic!("write: {error}"));
    let readme = [
        "# Title",                                                            // 1
        "",                                                                   // 2
        "[ok](docs/guide.md) [ok](docs/guide.md#the-guide) [ok](#title)",     // 3
        "[ok](docs/guide.md#why-did-this-get-that-limit-check---explain)",    // 4
        "[ok](docs/guide.md#same-1) [ok](docs/ \"a title\") `[no](code.md)`", // 5
        "[missing](docs/nothing.md)",                                         // 6
        "[bad anchor](docs/guide.md#nope) [bad own](#nope)",                  // 7
        "[outside](../elsewhere.md) [spaces](https://example.com/a b)",       // 8
        "```sh",                                                              // 9
        "floodgate serve",                                                    // 10
        "```",                                                                // 11
        "```sh illustrative",                                                 // 12
        "[not a link](nowhere.md)",                                           // 13
        "```",                                                                // 14
        "```console tested-by=no_such_test",                                  // 15
        "```",                                                                // 16
        "```bash tested-by=a_real_test",                                      // 17
        "```",                                                                // 18
        "```",                                                                // 19
        "$ floodgate check",                                                  // 20
        "```",                                                                // 21
        "```sh illustrative",                                                 // 22
        "",                                                                   // 23
    ]
    .join("\n");
    let tests: HashSet<String> = ["a_real_test".to_owned()].into_iter().collect();
    let checked = check_document(root, Path::new("README.md"), &readme, &tests);
    let expected = [
        "README.md:6: link \"docs/nothing.md\": no such file or directory",
        "README.md:7: link \"docs/guide.md#nope\": docs/guide.md has no heading with the slug \"nope\"",
        "README.md:7: link \"#nope\": README.md has no heading with the slug \"nope\"",
        "README.md:8: link \"../elsewhere.md\": leads outside the repository",
        "README.md:8: link \"https://example.com/a b\": a URL cannot contain spaces",
        "README.md:9: ```sh block: marked neither `illustrative` nor `tested-by=<test fn>` nor `run`",
        "README.md:15: ```console block: tested-by=no_such_test: no test function `no_such_test` under tests/, src/, core/, testkit/, examples/ or benches/",
        "README.md:19: ``` block starting with a `$ ` prompt: label it ```console and mark it",
        "README.md:22: ```sh block: not closed",
    ];
    let found: Vec<&str> = checked.problems.iter().map(String::as_str).collect();
    assert_eq!(found, expected, "\nfound:\n{}", checked.problems.join("\n"));
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(slug("Quick start"), "quick-start");
    assert_eq!(slug("Redis over TLS"), "redis-over-tls");
    assert_eq!(slug("The `limit_req` rules"), "the-limit_req-rules");
    assert_eq!(
        slug("Why did this descriptor get that limit? `check --explain`"),
        "why-did-this-descriptor-get-that-limit-check---explain"
    );
    assert_eq!(slug("Routes → descriptors"), "routes--descriptors");
    assert_eq!(slug("[Envoy](envoy.md), step 1."), "envoy-step-1");
    assert_eq!(slug("Différences"), "différences");
}

/// The blocks marked `tested-by=examples_answer_as_shown`: in each document, the one holding a
/// `floodgate serve …` line starts that server on free loopback ports, and every other one is run
/// against it, each command's output compared with the `# ` lines below it.
#[test]
fn examples_answer_as_shown() {
    const NAME: &str = "examples_answer_as_shown";
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = path_with_floodgate();
    let mut problems = Vec::new();
    let mut documents_run = 0;
    let mut logs = Vec::new();
    for relative in markdown_files(root) {
        let before = problems.len();
        let text = read(&root.join(&relative));
        let (_, fences) = split_fences(&text);
        let marked: Vec<&Fence> = fences
            .iter()
            .filter(|fence| {
                fence.info.split_whitespace().any(|mark| {
                    mark.strip_prefix("tested-by=")
                        .is_some_and(|names| names.split(',').any(|n| n == NAME))
                })
            })
            .collect();
        if marked.is_empty() {
            continue;
        }
        let serves: Vec<(usize, Vec<String>)> = marked
            .iter()
            .flat_map(|fence| {
                fence.body.iter().enumerate().filter_map(|(offset, line)| {
                    serve_arguments(line).map(|args| (fence.line + 1 + offset, args))
                })
            })
            .collect();
        let place = |line: usize| format!("{}:{line}", relative.display());
        let [(serve_line, args)] = serves.as_slice() else {
            problems.push(format!(
                "{}: {} blocks marked tested-by={NAME} hold a `floodgate serve` line; exactly one must",
                place(marked[0].line),
                serves.len()
            ));
            continue;
        };
        let server = match Server::start(args) {
            Ok(server) => server,
            Err(error) => {
                problems.push(format!("{}: {error}", place(*serve_line)));
                continue;
            }
        };
        documents_run += 1;
        for fence in marked {
            if fence
                .body
                .iter()
                .any(|line| serve_arguments(line).is_some())
            {
                continue;
            }
            let mut steps: Vec<(usize, String, Vec<String>)> = Vec::new();
            for (offset, line) in fence.body.iter().enumerate() {
                let number = fence.line + 1 + offset;
                let trimmed = line.trim();
                if let Some(shown) = trimmed.strip_prefix('#') {
                    let shown = shown.strip_prefix(' ').unwrap_or(shown);
                    if let Some((_, _, expected)) = steps.last_mut() {
                        expected.push(shown.trim_end().to_owned());
                    }
                } else if !trimmed.is_empty() {
                    steps.push((number, trimmed.to_owned(), Vec::new()));
                }
            }
            if steps.is_empty() {
                problems.push(format!("{}: no command to run", place(fence.line)));
            }
            for (number, command, expected) in steps {
                match run_shell(root, &path, &server.localize(&command)) {
                    Ok(output) => {
                        problems.extend(compare(&place(number), &command, &expected, &output))
                    }
                    Err(error) => problems.push(format!(
                        "{}: cannot run `{command}`: {error}",
                        place(number)
                    )),
                }
            }
        }
        if problems.len() > before {
            logs.push(format!(
                "floodgate serve {} (for {}), its log:\n{}",
                args.join(" "),
                relative.display(),
                server.log()
            ));
        }
    }
    assert!(documents_run > 0, "no block is marked tested-by={NAME}");
    assert!(
        problems.is_empty(),
        "{} problem(s) in the documentation's examples (ports moved to free ones; conventions: docs/README.md):\n{}\n\n{}",
        problems.len(),
        problems.join("\n"),
        logs.join("\n")
    );
}

/// The arguments after `serve` of a `floodgate serve …` (or `cargo run --release -- serve …`)
/// line, up to a comment or a trailing `&`.
fn serve_arguments(line: &str) -> Option<Vec<String>> {
    let line = line.trim();
    let rest = line
        .strip_prefix("floodgate serve")
        .or_else(|| line.strip_prefix("cargo run --release -- serve"))?;
    if !(rest.is_empty() || rest.starts_with(' ')) {
        return None;
    }
    Some(
        rest.split_whitespace()
            .take_while(|word| !word.starts_with('#') && *word != "&")
            .map(str::to_owned)
            .collect(),
    )
}

/// A floodgate started for the examples, on free loopback ports, stopped when dropped.
struct Server {
    child: Child,
    grpc: u16,
    http: u16,
    metrics: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(args: &[String]) -> Result<Server, String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = tempfile::tempdir().map_err(|error| format!("tempdir: {error}"))?;
        let log = dir.path().join("floodgate.log");
        let ports: Vec<u16> = (0..3).map(|_| floodgate_testkit::free_port()).collect();
        let (grpc, http, metrics) = (ports[0], ports[1], ports[2]);
        let file = std::fs::File::create(&log).map_err(|error| format!("log file: {error}"))?;
        let err = file
            .try_clone()
            .map_err(|error| format!("log file: {error}"))?;
        let child = Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .arg("serve")
            .args(args)
            .args(["--grpc-addr", &format!("127.0.0.1:{grpc}")])
            .args(["--http-addr", &format!("127.0.0.1:{http}")])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
            .current_dir(root)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .map_err(|error| format!("cannot start floodgate: {error}"))?;
        let mut server = Server {
            child,
            grpc,
            http,
            metrics,
            log,
            _dir: dir,
        };
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!(
                    "`floodgate serve {}` exited ({status}):\n{}",
                    args.join(" "),
                    server.log()
                ));
            }
            let up = [server.grpc, server.http, server.metrics]
                .iter()
                .all(|port| TcpStream::connect(("127.0.0.1", *port)).is_ok());
            if up {
                return Ok(server);
            }
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!(
                    "`floodgate serve {}` did not open its ports in 30 s:\n{}",
                    args.join(" "),
                    server.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The command as it must run against this server: the default ports moved to its own,
    /// and `floodgate check` pointed at its gRPC port.
    fn localize(&self, command: &str) -> String {
        let mut command = command
            .replace("127.0.0.1:8080", &format!("127.0.0.1:{}", self.http))
            .replace("127.0.0.1:8081", &format!("127.0.0.1:{}", self.grpc))
            .replace("127.0.0.1:6070", &format!("127.0.0.1:{}", self.metrics));
        if command.contains("floodgate check")
            && !command.contains("--addr")
            && !command.contains("--explain")
        {
            command = command.replacen(
                "floodgate check",
                &format!("floodgate check --addr http://127.0.0.1:{}", self.grpc),
                1,
            );
        }
        command
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one document holds: its problems, and the `run` blocks to execute.
struct Checked {
    problems: Vec<String>,
    runnable: Vec<RunBlock>,
}

/// A block marked `run`: where it is, and its lines.
struct RunBlock {
    file: PathBuf,
    line: usize,
    lines: Vec<String>,
}

/// One fenced block as the scanner saw it.
struct Fence {
    line: usize,
    marker: String,
    info: String,
    body: Vec<String>,
    closed: bool,
}

fn check_document(root: &Path, file: &Path, text: &str, tests: &HashSet<String>) -> Checked {
    let mut problems = Vec::new();
    let mut runnable = Vec::new();
    let (prose, fences) = split_fences(text);
    let own_slugs = heading_slugs(text);
    for (number, line) in &prose {
        for target in links(&blank_code_spans(line)) {
            if let Some(problem) = check_link(root, file, &own_slugs, &target) {
                problems.push(format!(
                    "{}:{number}: link \"{target}\": {problem}",
                    file.display()
                ));
            }
        }
    }
    for fence in fences {
        let mut words = fence.info.split_whitespace();
        let language = words.next().unwrap_or("");
        let marks: Vec<&str> = words.collect();
        let place = format!("{}:{}", file.display(), fence.line);
        let prompted = language.is_empty()
            && fence
                .body
                .iter()
                .find(|line| !line.trim().is_empty())
                .is_some_and(|line| line.trim_start().starts_with("$ "));
        if !fence.closed {
            problems.push(format!(
                "{place}: {}{language} block: not closed",
                fence.marker
            ));
            continue;
        }
        if prompted {
            problems.push(format!(
                "{place}: {} block starting with a `$ ` prompt: label it ```console and mark it",
                fence.marker
            ));
            continue;
        }
        if !SHELL_LANGUAGES.contains(&language) {
            continue;
        }
        let block = format!("{}{language} block", fence.marker);
        let mut marked = false;
        for mark in &marks {
            if *mark == "illustrative" {
                marked = true;
            } else if *mark == "run" {
                marked = true;
                runnable.push(RunBlock {
                    file: file.to_path_buf(),
                    line: fence.line,
                    lines: fence.body.clone(),
                });
            } else if let Some(names) = mark.strip_prefix("tested-by=") {
                marked = true;
                for name in names.split(',') {
                    if name.is_empty() || !tests.contains(name) {
                        problems.push(format!(
                            "{place}: {block}: tested-by={names}: no test function `{name}` under {}",
                            tree_list()
                        ));
                    }
                }
            } else {
                problems.push(format!("{place}: {block}: unknown mark `{mark}`"));
                marked = true;
            }
        }
        if !marked {
            problems.push(format!(
                "{place}: {block}: marked neither `illustrative` nor `tested-by=<test fn>` nor `run`"
            ));
        }
    }
    Checked { problems, runnable }
}

fn tree_list() -> String {
    let trees: Vec<String> = TEST_TREES.iter().map(|tree| format!("{tree}/")).collect();
    match trees.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => trees.join(""),
    }
}

/// Splits a document into its prose lines (numbered from 1) and its
/// fenced blocks.
fn split_fences(text: &str) -> (Vec<(usize, String)>, Vec<Fence>) {
    let mut prose = Vec::new();
    let mut fences = Vec::new();
    let mut open: Option<Fence> = None;
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let trimmed = line.trim_start();
        let fence_char = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let run = fence_char.map_or(0, |c| trimmed.chars().take_while(|x| *x == c).count());
        match open.as_mut() {
            Some(fence) => {
                let closes = run >= fence.marker.len()
                    && fence_char == fence.marker.chars().next()
                    && trimmed[run..].trim().is_empty();
                if closes {
                    fence.closed = true;
                    fences.extend(open.take());
                } else {
                    fence.body.push(line.to_owned());
                }
            }
            None if run >= 3 => {
                let marker: String = trimmed[..run].to_owned();
                open = Some(Fence {
                    line: number,
                    marker,
                    info: trimmed[run..].trim().to_owned(),
                    body: Vec::new(),
                    closed: false,
                });
            }
            None => prose.push((number, line.to_owned())),
        }
    }
    fences.extend(open);
    (prose, fences)
}

/// Replaces inline code spans (`` `…` ``, ``` ``…`` ```) by spaces: links inside them are text.
fn blank_code_spans(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let ticks = chars[i..].iter().take_while(|c| **c == '`').count();
        let mut j = i + ticks;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let run = chars[j..].iter().take_while(|c| **c == '`').count();
                if run == ticks {
                    close = Some(j + run);
                    break;
                }
                j += run;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => {
                out.extend(std::iter::repeat_n(' ', end - i));
                i = end;
            }
            None => {
                out.extend(&chars[i..i + ticks]);
                i += ticks;
            }
        }
    }
    out
}

/// The targets of inline links and images (`[text](target "title")`) and of reference
/// definitions (`[label]: target`) on one prose line.
fn links(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let trimmed = line.trim_start();
    if trimmed.starts_with('[') {
        if let Some(end) = trimmed.find("]:") {
            if !trimmed[..end].contains("](") {
                if let Some(target) = trimmed[end + 2..].split_whitespace().next() {
                    found.push(target.trim_matches(['<', '>']).to_owned());
                }
                return found;
            }
        }
    }
    let bytes = line.as_bytes();
    let mut from = 0;
    while let Some(at) = line[from..].find("](") {
        let start = from + at + 2;
        let mut depth = 0usize;
        let mut end = None;
        for (offset, byte) in bytes[start..].iter().enumerate() {
            match byte {
                b'(' => depth += 1,
                b')' if depth == 0 => {
                    end = Some(start + offset);
                    break;
                }
                b')' => depth -= 1,
                _ => {}
            }
        }
        let Some(end) = end else { break };
        let inside = line[start..end].trim();
        let target = match inside.strip_prefix('<') {
            Some(rest) => rest.split('>').next().unwrap_or("").to_owned(),
            // A title may follow the target: `(path "title")`, `(path 'title')`, `(path (title))`.
            None => match inside.split_once(char::is_whitespace) {
                Some((path, title)) if is_title(title.trim()) => path.to_owned(),
                _ => inside.to_owned(),
            },
        };
        found.push(target);
        from = end + 1;
    }
    found
}

fn is_title(text: &str) -> bool {
    let quoted = |open: char, close: char| {
        text.len() >= 2 && text.starts_with(open) && text.ends_with(close)
    };
    quoted('"', '"') || quoted('\'', '\'') || quoted('(', ')')
}

fn check_link(root: &Path, file: &Path, own_slugs: &[String], target: &str) -> Option<String> {
    if target.is_empty() {
        return Some("empty target".to_owned());
    }
    if target.starts_with("http://") || target.starts_with("https://") {
        return target
            .contains(char::is_whitespace)
            .then(|| "a URL cannot contain spaces".to_owned());
    }
    if target.starts_with("mailto:") {
        return None;
    }
    if let Some(anchor) = target.strip_prefix('#') {
        return (!own_slugs.iter().any(|s| s == anchor)).then(|| {
            format!(
                "{} has no heading with the slug \"{anchor}\"",
                file.display()
            )
        });
    }
    if target.contains("://") {
        return Some("not a relative path nor an http(s) URL".to_owned());
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let path = percent_decode(path.split('?').next().unwrap_or(path));
    let base = file.parent().unwrap_or(Path::new(""));
    let Some(relative) = normalize(&base.join(&path)) else {
        return Some("leads outside the repository".to_owned());
    };
    let absolute = root.join(&relative);
    if !absolute.exists() {
        return Some("no such file or directory".to_owned());
    }
    let anchor = anchor?;
    if absolute.extension().is_some_and(|e| e == "md") {
        let slugs = heading_slugs(&read(&absolute));
        if !slugs.iter().any(|s| s == anchor) {
            return Some(format!(
                "{} has no heading with the slug \"{anchor}\"",
                relative.display()
            ));
        }
    } else if !anchor.starts_with('L') {
        return Some(format!(
            "an anchor on {}, which is not Markdown",
            relative.display()
        ));
    }
    None
}

/// `a/./b/../c` as `a/c`; `None` when it climbs above the repository root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The anchors GitHub gives a document's ATX headings (`#` to `######`), duplicates numbered
/// `-1`, `-2`, … as GitHub does.
fn heading_slugs(text: &str) -> Vec<String> {
    let (prose, _) = split_fences(text);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut slugs = Vec::new();
    for (_, raw) in &prose {
        let trimmed = raw.trim_start();
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        if hashes == 0 || hashes > 6 || raw.len() - trimmed.len() > 3 {
            continue;
        }
        let rest = &trimmed[hashes..];
        if !(rest.is_empty() || rest.starts_with(' ')) {
            continue;
        }
        let title = rest.trim().trim_end_matches('#').trim();
        let base = slug(title);
        let count = seen.entry(base.clone()).or_insert(0);
        slugs.push(if *count == 0 {
            base.clone()
        } else {
            format!("{base}-{count}")
        });
        *count += 1;
    }
    slugs
}

/// GitHub's anchor for a heading: the rendered text (links reduced to their text, code to its
/// content), lowercased, every character but letters, digits, `-` and `_` dropped, each space a
/// `-`.
fn slug(title: &str) -> String {
    let mut text = String::new();
    let mut rest = title;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](") else {
            break;
        };
        let Some(end) = rest[open + close..].find(')') else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..open + close]);
        rest = &rest[open + close + end + 1..];
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// README.md and every `*.md` under docs/, relative to the root, sorted.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut found = vec![PathBuf::from("README.md")];
    let mut pending = vec![PathBuf::from("docs")];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let relative = dir.join(entry.file_name());
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                pending.push(relative);
            } else if relative.extension().is_some_and(|e| e == "md") {
                found.push(relative);
            }
        }
    }
    found.sort();
    found
}

/// The names of the functions marked as tests (`#[test]`, `#[tokio::test]`, …) in the `.rs`
/// files of the test and source trees.
fn test_functions(root: &Path) -> HashSet<String> {
    let mut names = HashSet::new();
    let mut pending: Vec<PathBuf> = TEST_TREES.iter().map(|tree| root.join(tree)).collect();
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                collect_tests(&read(&path), &mut names);
            }
        }
    }
    names
}

fn collect_tests(source: &str, names: &mut HashSet<String>) {
    let mut attribute_is_test = false;
    for line in source.lines() {
        let line = line.trim();
        if line.starts_with("#[") {
            if line.contains("test]") || line.contains("test(") || line.contains("::test") {
                attribute_is_test = true;
            }
            continue;
        }
        if line.is_empty() || line.starts_with("//") {
            continue;
        }
        if attribute_is_test {
            let after_fn = line
                .split_once("fn ")
                .filter(|(before, _)| {
                    before
                        .split_whitespace()
                        .all(|w| ["pub", "async", "unsafe", "pub(crate)"].contains(&w))
                })
                .map(|(_, after)| after);
            if let Some(after) = after_fn {
                let name: String = after
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                names.insert(name);
            }
        }
        attribute_is_test = false;
    }
}

/// Runs a `run` block: each `$ ` line in `sh` at the root with the built binary first on the
/// PATH, its output compared with the lines that follow it.
fn run_block(root: &Path, block: &RunBlock) -> Vec<String> {
    let path = path_with_floodgate();
    let mut problems = Vec::new();
    let mut steps: Vec<(usize, String, Vec<String>)> = Vec::new();
    for (offset, line) in block.lines.iter().enumerate() {
        let number = block.line + 1 + offset;
        if let Some(command) = line.trim_start().strip_prefix("$ ") {
            steps.push((number, command.to_owned(), Vec::new()));
        } else if let Some((_, _, expected)) = steps.last_mut() {
            expected.push(line.trim_end().to_owned());
        } else if !line.trim().is_empty() {
            problems.push(format!(
                "{}:{number}: `run` block: output before any `$ ` command",
                block.file.display()
            ));
        }
    }
    if steps.is_empty() {
        problems.push(format!(
            "{}:{}: `run` block without a `$ ` command",
            block.file.display(),
            block.line
        ));
    }
    for (number, command, expected) in steps {
        let output = run_shell(root, &path, &command);
        let output = match output {
            Ok(output) => output,
            Err(error) => {
                problems.push(format!(
                    "{}:{number}: cannot run `{command}`: {error}",
                    block.file.display()
                ));
                continue;
            }
        };
        let place = format!("{}:{number}", block.file.display());
        problems.extend(compare(&place, &command, &expected, &output));
    }
    problems
}

/// The PATH with the directory of the floodgate binary built for these tests first.
fn path_with_floodgate() -> std::ffi::OsString {
    let binary = Path::new(env!("CARGO_BIN_EXE_floodgate"));
    let bin_dir = binary.parent().unwrap_or(Path::new("."));
    match std::env::var_os("PATH") {
        Some(old) => {
            let mut dirs = vec![bin_dir.to_path_buf()];
            dirs.extend(std::env::split_paths(&old));
            std::env::join_paths(dirs).unwrap_or(old)
        }
        None => bin_dir.as_os_str().to_owned(),
    }
}

/// Runs one command line with `sh` in the repository root, without the environment variables
/// that would change what floodgate reads, killed after 30 s.
fn run_shell(
    root: &Path,
    path: &std::ffi::OsStr,
    command: &str,
) -> std::io::Result<std::process::Output> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(root)
        .env_clear()
        .env("PATH", path)
        .env("HOME", std::env::var_os("HOME").unwrap_or_default())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let started = Instant::now();
    while child.try_wait()?.is_none() {
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output()
}

/// The command's standard output against the lines the block shows (trailing blanks and
/// trailing empty lines aside).
fn compare(
    place: &str,
    command: &str,
    expected: &[String],
    output: &std::process::Output,
) -> Option<String> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let actual: Vec<String> = stdout.lines().map(|l| l.trim_end().to_owned()).collect();
    let trim = |lines: &[String]| -> Vec<String> {
        let mut lines = lines.to_vec();
        while lines.last().is_some_and(|l| l.is_empty()) {
            lines.pop();
        }
        lines
    };
    (trim(&actual) != trim(expected)).then(|| {
        format!(
            "{place}: `{command}` printed something else than the block shows.\n--- the block:\n{}\n--- the run (exit {:?}):\n{}\n--- stderr:\n{}",
            expected.join("\n"),
            output.status.code(),
            actual.join("\n"),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()))
}
