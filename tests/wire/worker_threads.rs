//! How many threads serve, by default and when asked: one with Redis (the single-threaded
//! scheduler: no `tokio-rt-worker` thread), one per CPU with the memory store, and whatever
//! `--worker-threads` or TOKIO_WORKER_THREADS say.

use std::time::Duration;

use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::{repo_file, serve_command, tempdir, wait_for_port, Running};

/// The `tokio-rt-worker` threads of a floodgate started with `args` and `env`, once it serves:
/// `expected` if it settles there within tokio's blocking-pool keep-alive.
fn workers(args: &[&str], env: &[(&str, &str)], expected: usize) -> usize {
    let dir = tempdir();
    let (mut command, (grpc_port, _, _)) = serve_command();
    command
        .arg("--config")
        .arg(repo_file("config"))
        .args(args)
        .env_remove("FLOODGATE_WORKER_THREADS")
        .env_remove("TOKIO_WORKER_THREADS");
    for (name, value) in env {
        command.env(name, value);
    }
    let mut process = Running::spawn("floodgate", &mut command, dir.path());
    wait_for_port(grpc_port, Duration::from_secs(10), "floodgate");
    // A blocking-pool thread carries the workers' name too, and lives on for tokio's 10 s
    // keep-alive once its work is done: a count above the workers may settle, one below never.
    let workers = settle(expected, || worker_count(process.pid()));
    let status = process.terminate(Duration::from_secs(10));
    assert!(
        status.is_some_and(|status| status.success()),
        "floodgate did not stop cleanly: {status:?}\n{}",
        process.log_text()
    );
    workers
}

fn worker_count(pid: u32) -> usize {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap_or_else(|error| panic!("cannot list floodgate's threads: {error}"));
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .filter(|name| name.trim() == "tokio-rt-worker")
        .count()
}

/// `count()` once it is `expected`, or what it was last after 15 s.
fn settle(expected: usize, mut count: impl FnMut() -> usize) -> usize {
    let started = std::time::Instant::now();
    loop {
        let counted = count();
        if counted == expected || started.elapsed() > Duration::from_secs(15) {
            return counted;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// What one thread per CPU looks like: that many workers, or none on one CPU.
fn workers_for(threads: usize) -> usize {
    if threads == 1 {
        0
    } else {
        threads
    }
}

// One test, so that its floodgates start one at a time.
#[test]
fn the_store_sets_the_default_and_the_flag_or_tokio_worker_threads_override_it() {
    let redis = RedisServer::start();
    let url = redis.url();
    let redis_args = ["--store", "redis", "--redis-url", &url];
    assert_eq!(workers(&redis_args, &[], 0), 0);
    let per_cpu = workers_for(cpus());
    assert_eq!(workers(&[], &[], per_cpu), per_cpu);

    let with_flag: Vec<&str> = redis_args
        .iter()
        .copied()
        .chain(["--worker-threads", "2"])
        .collect();
    assert_eq!(workers(&with_flag, &[], 2), 2);
    assert_eq!(workers(&redis_args, &[("TOKIO_WORKER_THREADS", "3")], 3), 3);
    assert_eq!(workers(&["--worker-threads", "1"], &[], 0), 0);
    // The flag wins over the variable.
    assert_eq!(
        workers(
            &["--worker-threads", "2"],
            &[("TOKIO_WORKER_THREADS", "1")],
            2
        ),
        2
    );
}
