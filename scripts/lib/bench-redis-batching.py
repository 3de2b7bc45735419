"""The "Batching" section of docs/benchmarks-redis.md, from the runs scripts/bench-redis.sh
left in WORK (argv[1]): one script call per decision, batches (--redis-batch-max) and the memory
store, each at peak twice, then at a tenth of the one-call peak (one call, batches, memory,
memory, batches, one call) and batches and memory at half of it (batches, memory, memory,
batches); and what redis-server's CPU paid per unpipelined redis-benchmark call of the same
script. Prints
Markdown. Every figure is a ratio of runs of the same session, with the raw numbers beside it.
"""

import json
import os
import sys

work = sys.argv[1]
env = os.environ
batch_max = env["BENCH_BATCH_MAX"]


def report(name):
    with open(f"{work}/{name}.json") as f:
        return json.load(f)["total"]["legit"]


def usage(name):
    """(redis-server CPU s, server CPU s, decisions, script calls, script s) of run NAME."""
    with open(f"{work}/{name}.cpu") as f:
        r1, r0, s1, s0, d1, d0, c1, c0, u1, u0 = map(float, f.read().split())
    return r1 - r0, s1 - s0, int(d1 - d0), int(c1 - c0), (u1 - u0) / 1e6


def redis_benchmark_cost():
    """redis-server CPU µs per call, script µs per call and the calls, over redis-benchmark's
    unpipelined runs."""
    cpu = script = 0.0
    calls = 0
    for name in ("evalsha", "evalsha-after"):
        with open(f"{work}/{name}.redis") as f:
            r1, r0, c1, c0, u1, u0 = map(float, f.read().split())
        cpu, calls, script = cpu + r1 - r0, calls + int(c1 - c0), script + u1 - u0
    return cpu / calls * 1e6, script / calls, calls


def sums(runs):
    """Totals over RUNS: (decisions/s of each, redis CPU s, server CPU s, decisions, calls,
    script s)."""
    rates = [report(run)["achieved_rps"] for run in runs]
    redis_s = server_s = script_s = 0.0
    decisions = calls = 0
    for run in runs:
        r, s, d, c, u = usage(run)
        redis_s, server_s, script_s = redis_s + r, server_s + s, script_s + u
        decisions, calls = decisions + d, calls + c
    return rates, redis_s, server_s, decisions, calls, script_s


def total(runs, field):
    values = [report(run)[field] for run in runs]
    return None if any(v is None for v in values) else sum(values)


def slash(values, fmt="{:,.0f}"):
    return " / ".join("–" if v is None else fmt.format(v) for v in values)


per_call_us, script_per_call_us, benchmark_calls = redis_benchmark_cost()
modes = [
    ("memory store", ["mode-memory-1", "mode-memory-2"]),
    ("one call per decision (`--redis-batch-max 1`)", ["mode-one-1", "mode-one-2"]),
    (f"batches (`--redis-batch-max {batch_max}`)", ["mode-batch-1", "mode-batch-2"]),
]
memory_rate = sum(sums(modes[0][1])[0])
one_p99 = total(modes[1][1], "p99_us")

lines = []
w = lines.append
w(f"## Batching (`--redis-batch-max {batch_max}`)")
w("")
w("Three floodgates on the same redis-server, loaded one at a time by the same loadgen "
  f"({env['BENCH_CLIENTS']} in flight, {env['BENCH_SECONDS']} s per run, `--worker-threads "
  f"{env['BENCH_WORKER_THREADS']}` each): one script call per decision, calls carrying up to "
  f"{batch_max} requests, and the memory store. Each ran twice at peak, in the order one call, "
  "batches, memory, memory, batches, one call; figures are over both runs. Redis CPU is "
  "redis-server's `/proc/<pid>/stat` time over the runs divided by floodgate's admitted "
  "decisions; script calls and script µs are `INFO commandstats` `cmdstat_evalsha` calls and "
  "time (Redis's own count of the time spent in the script, without reading and writing the "
  "sockets) over the same decisions. The redis-benchmark row is what redis-server's CPU paid per call of the same "
  f"`EVALSHA` ({benchmark_calls:,} calls, {env['BENCH_CLIENTS']} clients, no pipelining, the "
  "two runs of the first table).")
w("")
w("| mode | decisions/s (each run) | ÷ memory store | Redis CPU µs/decision | ÷ redis-benchmark's µs/call "
  "| script calls/decision | script µs/decision | floodgate CPU µs/decision | p50 µs | p99 µs "
  "| p99 ÷ one call |")
w("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
for label, runs in modes:
    rates, redis_s, server_s, decisions, calls, script_s = sums(runs)
    redis_us = redis_s / decisions * 1e6 if decisions else 0.0
    is_memory = runs is modes[0][1]
    p99 = total(runs, "p99_us")
    p50s = [report(run)["p50_us"] for run in runs]
    p99s = [report(run)["p99_us"] for run in runs]
    w(f"| {label} | {slash(rates)} | {sum(rates) / memory_rate:.2f} "
      f"| {'–' if is_memory else f'{redis_us:,.1f}'} "
      f"| {'–' if is_memory else f'{redis_us / per_call_us:.2f}'} "
      f"| {'–' if is_memory else f'{calls / decisions:.3f}'} "
      f"| {'–' if is_memory else f'{script_s / decisions * 1e6:,.1f}'} "
      f"| {server_s / decisions * 1e6:,.1f} | {slash(p50s)} | {slash(p99s)} "
      f"| {'–' if is_memory or not p99 or not one_p99 else f'{p99 / one_p99:.2f}'} |")
w(f"| redis-benchmark `EVALSHA`, no pipelining | | | {per_call_us:,.1f} | 1.00 | 1 "
  f"| {script_per_call_us:,.1f} | | | | |")
w("")

def runs_table(runs, latencies):
    """One row per run of RUNS ((mode, run name) pairs, in the order they ran), with the
    client-side LATENCIES (report fields such as p50_us), script calls and floodgate's CPU per
    decision."""
    heads = " | ".join(f"{field.removesuffix('_us')} µs" for field in latencies)
    w(f"| run | mode | achieved/s | {heads} | script calls/decision "
      "| floodgate CPU µs/decision | errors |")
    w("|---|---|--:|" + "--:|" * len(latencies) + "--:|--:|--:|")
    for index, (mode, run) in enumerate(runs, 1):
        r = report(run)
        _, server_s, decisions, calls, _ = usage(run)
        is_memory = mode == "memory store"
        cells = " | ".join(slash([r[field]]) for field in latencies)
        w(f"| {index} | {mode} | {r['achieved_rps']:,.0f} | {cells} "
          f"| {'–' if is_memory else f'{calls / decisions if decisions else 0:.3f}'} "
          f"| {server_s / decisions * 1e6 if decisions else 0:,.1f} | {r['error']:,} |")
    w("")


tenth = [("one call", "tenth-one-1"), ("batches", "tenth-batch-1"),
         ("memory store", "tenth-memory-1"), ("memory store", "tenth-memory-2"),
         ("batches", "tenth-batch-2"), ("one call", "tenth-one-2")]
w(f"**At a tenth of the one-call peak** ({int(env['BENCH_TENTH']):,} decisions/s, Poisson "
  f"arrivals, open loop, {env['BENCH_TENTH_SECONDS']} s per run), back to back in the order "
  "one call, batches, memory, memory, batches, one call:")
w("")
runs_table(tenth, ["p50_us", "p90_us", "p99_us"])


def cpu_per_decision(runs):
    """floodgate's CPU µs per decision over RUNS."""
    _, _, server_s, decisions, _, _ = sums(runs)
    return server_s / decisions * 1e6 if decisions else None


memory_cpu = cpu_per_decision(["tenth-memory-1", "tenth-memory-2"])
batch_cpu = cpu_per_decision(["tenth-batch-1", "tenth-batch-2"])
one_cpu = cpu_per_decision(["tenth-one-1", "tenth-one-2"])
if memory_cpu and batch_cpu and one_cpu:
    w(f"floodgate's own CPU per decision at this offered rate (both runs of each): batches "
      f"{batch_cpu:,.1f} µs, **{batch_cpu / memory_cpu:.2f}×** the memory store's {memory_cpu:,.1f} µs; "
      f"one call per decision {one_cpu:,.1f} µs, {one_cpu / memory_cpu:.2f}×.")
    w("")
verdicts = []
for field, name in (("p50_us", "p50"), ("p99_us", "p99")):
    ones, batches = total(["tenth-one-1", "tenth-one-2"], field), total(
        ["tenth-batch-1", "tenth-batch-2"], field)
    if ones and batches:
        ratio = batches / ones
        verdicts.append((name, ratio))
noise = []
for field, name in (("p50_us", "p50"), ("p99_us", "p99")):
    first, last = report("tenth-one-1")[field], report("tenth-one-2")[field]
    if first and last:
        noise.append(f"{name} {max(first, last) / min(first, last):.2f}×")
if verdicts:
    within = all(ratio <= 1.05 for _, ratio in verdicts)
    w("Batches ÷ one call (sum of the two runs each): "
      + ", ".join(f"{name} **{ratio:.2f}**" for name, ratio in verdicts)
      + (": within 5 % of one call per decision." if within
         else ": not within 5 % of one call per decision.")
      + (" The two one-call runs alone differ by " + ", ".join(noise)
         + ": what the machine's noise moves by itself." if noise else ""))
w("")
same_half = [("batches", "samehalf-batch-1"), ("memory store", "samehalf-memory-1"),
             ("memory store", "samehalf-memory-2"), ("batches", "samehalf-batch-2")]
w(f"**At half of the one-call peak** ({int(env['BENCH_SAME_HALF']):,} decisions/s, Poisson "
  f"arrivals, open loop, {env['BENCH_TENTH_SECONDS']} s per run), batches and the memory store "
  "back to back in the order batches, memory, memory, batches:")
w("")
runs_table(same_half, ["p50_us", "p99_us"])
half_memory = cpu_per_decision(["samehalf-memory-1", "samehalf-memory-2"])
half_batch = cpu_per_decision(["samehalf-batch-1", "samehalf-batch-2"])
if half_memory and half_batch:
    w(f"floodgate's own CPU per decision at this offered rate (both runs of each): batches "
      f"{half_batch:,.1f} µs, **{half_batch / half_memory:.2f}×** the memory store's "
      f"{half_memory:,.1f} µs.")
    w("")
print("\n".join(lines))
