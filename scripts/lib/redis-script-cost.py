#!/usr/bin/env python3
"""What floodgate's decision script costs redis-server per decision, without floodgate.

A quick loop for working on the Lua (docs/redis.md, "Batching"): it starts its own
redis-server on a free loopback port, loads the script, and sends CALLS script calls of BATCH
single-counter requests each (a fixed window unless --algorithm names another), 10 calls in
flight, on random keys. It prints
redis-server's CPU time per decision (/proc/<pid>/stat, which counts reading the commands and
writing the replies) and INFO commandstats' script time per decision (wall time inside the
script, which a busy host inflates). Compare two scripts in turns, in one sitting: the host's
noise moves both alike.

    cargo build --release --example redis_script
    scripts/lib/redis-script-cost.py [--script FILE] [--batch 64] [--calls 2000] [--keys 1000]
        [--in-flight 10] [--algorithm fixed_window]

The default script is the one floodgate runs (`redis_script source`); --script takes another
(e.g. an edited copy of src/store/redis/lua/*.lua joined in script.rs's order).
"""

import argparse
import os
import random
import socket
import subprocess
import sys
import time

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "target", "release", "examples",
                       "redis_script")


def encode(args):
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class Connection:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.reader = self.sock.makefile("rb")

    def read(self):
        line = self.reader.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind in (b"+", b":"):
            return rest
        if kind == b"$":
            size = int(rest)
            return None if size < 0 else self.reader.read(size + 2)[:-2]
        if kind == b"*":
            return [self.read() for _ in range(int(rest))]
        raise RuntimeError(f"unexpected reply {line!r}")

    def call(self, *args):
        self.sock.sendall(encode(args))
        return self.read()

    def pipeline(self, commands):
        self.sock.sendall(b"".join(encode(command) for command in commands))
        return [self.read() for _ in commands]


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def script_stats(connection):
    for line in connection.call("INFO", "commandstats").decode().splitlines():
        if line.startswith("cmdstat_evalsha:"):
            stats = dict(item.split("=") for item in line.split(":", 1)[1].split(","))
            return int(stats["calls"]), int(stats["usec"])
    return 0, 0


def example(*args):
    try:
        return subprocess.run([EXAMPLE, *args], check=True, capture_output=True,
                              text=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        sys.exit(f"redis-script-cost: {EXAMPLE} {' '.join(args)} failed ({error}); "
                 "build it with: cargo build --release --example redis_script")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--script", help="a script file instead of floodgate's")
    parser.add_argument("--batch", type=int, default=64, help="requests per script call")
    parser.add_argument("--calls", type=int, default=2000, help="script calls measured")
    parser.add_argument("--keys", type=int, default=1000, help="distinct counters")
    parser.add_argument("--algorithm", default="fixed_window",
                        help="the counters' algorithm, as a rule names it")
    parser.add_argument("--in-flight", type=int, default=10,
                        help="script calls sent together (1: each waits for the one before, "
                        "as redis-benchmark without pipelining)")
    options = parser.parse_args()
    if min(options.batch, options.calls, options.keys, options.in_flight) < 1:
        sys.exit("redis-script-cost: --batch, --calls, --keys and --in-flight must be at least 1")

    script = open(options.script).read() if options.script else example("source")
    # One request's call: numkeys, its key, then ARGV: the counts of requests, settings and
    # templates, the settings and the template (shared by every request of a batch), then the
    # request's own part (decide.lua).
    lines = example("call", "1000000000", options.algorithm).split("\n")
    key, argv = lines[1], lines[2:]
    argv = argv[:len(argv) - (argv[-1] == "")]
    shared_end = 3 + 4 * int(argv[1]) + 8 * int(argv[2])
    shared_args, request_args = argv[1:shared_end], argv[shared_end:]

    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                connection = Connection(port)
                connection.call("PING")
                break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit("redis-script-cost: redis-server did not start")
                time.sleep(0.05)
        sha = connection.call("SCRIPT", "LOAD", script).decode()

        def one_call():
            keys = [f"{key}:{random.randrange(options.keys)}" for _ in range(options.batch)]
            return (["EVALSHA", sha, len(keys), *keys, options.batch, *shared_args]
                    + request_args * options.batch)

        connection.call(*one_call())  # fails loudly if the script refuses the call
        calls = [one_call() for _ in range(200)]
        calls0, usec0 = script_stats(connection)
        cpu0 = cpu_seconds(server.pid)
        sent = 0
        while sent < options.calls:
            turn = min(options.in_flight, options.calls - sent)
            connection.pipeline([calls[(sent + i) % len(calls)] for i in range(turn)])
            sent += turn
        cpu1 = cpu_seconds(server.pid)
        calls1, usec1 = script_stats(connection)
        decisions = (calls1 - calls0) * options.batch
        print(f"batch {options.batch}: redis-server CPU {(cpu1 - cpu0) * 1e6 / decisions:.2f} "
              f"µs/decision, script time {(usec1 - usec0) / decisions:.2f} µs/decision "
              f"({calls1 - calls0} calls)")
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
