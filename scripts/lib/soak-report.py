"""Writes docs/soak.md from the work directory scripts/soak.sh filled (one folder per store:
peak.json, minute-N.json of six 10 s stages each, samples.csv every 10 s, summary.txt).

    soak-report.py --settle REPORT.md   reads a report's every-10-s tables back and prints when
                                        each store settled (see settled_after), for reports
                                        written before the report said so."""

import csv
import json
import os
import statistics
import sys

# Flat: within this share of the first sample after the warm-up.
FLAT = 0.10
# Settled in time: within this share of the run (see settled_after).
SETTLE_WITHIN = 0.25


def settled_after(rows):
    """The first whole minute from which every later minute's median RSS and median
    descriptors stay within FLAT of that minute's: how long the process took to grow to its
    working set (a store's tables double as its live counters reach their high-water). A leak
    never settles; a sample that caught a burst of queued calls moves its minute's median
    little. None if it never settles."""
    by_minute = {}
    for row in rows:
        by_minute.setdefault(int(float(row["t_s"]) // 60), []).append(row)
    medians = [(minute,
                statistics.median(int(r["rss_kib"]) for r in by_minute[minute]),
                statistics.median(int(r["fds"]) for r in by_minute[minute]))
               for minute in sorted(by_minute)]
    for at, (minute, rss, fds) in enumerate(medians):
        if all(abs(later_rss - rss) <= FLAT * rss and abs(later_fds - fds) <= FLAT * fds
               for _, later_rss, later_fds in medians[at:]):
            return minute
    return None


def settle_verdict(rows, run_minutes):
    """'settled after N min' and whether that is within SETTLE_WITHIN of the run."""
    minute = settled_after(rows)
    if minute is None:
        return "never", False
    return f"{minute} min", minute <= SETTLE_WITHIN * run_minutes


def rows_of_report(path):
    """Each store's samples from a report's "<store>: every 10 s" tables (MiB back to KiB)."""
    found, store, columns = {}, None, None
    for line in open(path):
        if line.startswith("## ") and line.rstrip().endswith(": every 10 s"):
            store, columns = line[3:].split(":")[0], None
            found[store] = []
        elif store and line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if columns is None:
                columns = cells
            elif cells[0][:1].isdigit():
                row = dict(zip(columns, cells))
                found[store].append({"t_s": row["t (s)"], "fds": row["fds"],
                                     "rss_kib": str(round(float(row["RSS MiB"]) * 1024))})
        elif store and line.startswith("## "):
            store = None
    return found


if len(sys.argv) == 3 and sys.argv[1] == "--settle":
    for name, samples_of_store in rows_of_report(sys.argv[2]).items():
        last = int(float(samples_of_store[-1]["t_s"]) // 60) + 1
        when, in_time = settle_verdict(samples_of_store, last)
        print(f"{name}: settled after {when} of {last} "
              f"({'within' if in_time else 'not within'} the first {SETTLE_WITHIN:.0%})")
    sys.exit(0)

env = os.environ
work = env["SOAK_WORK"]
stores = env["SOAK_STORES"].split()
minutes = int(env["SOAK_MINUTES"])
warmup_minutes = int(env["SOAK_WARMUP"])
out = sys.argv[1]


def stages(store):
    """Every 10 s stage of the soak, in order: (minute, start in seconds from the first
    minute's start, figures of all legitimate traffic). A minute's run began its length before
    its report was written (the file's mtime)."""
    found = []
    first_start = None
    for minute in range(1, minutes + 1):
        path = f"{work}/{store}/minute-{minute}.json"
        with open(path) as f:
            report = json.load(f)
        began = os.stat(path).st_mtime - report["total"]["duration_s"]
        if first_start is None:
            first_start = began
        for stage in report["stages"]:
            found.append((minute, began - first_start + stage["start_s"], stage["legit"]))
    return found


def stage_at(found, t):
    """The stage running at `t` seconds (the sampler starts with the first minute), or the
    last one begun before it."""
    current = None
    for stage in found:
        if stage[1] <= t:
            current = stage
    return current


def samples(store):
    with open(f"{work}/{store}/samples.csv") as f:
        return [row for row in csv.DictReader(f) if row["rss_kib"]]


def spread(values, base):
    """The largest departure from `base`, as a share of it."""
    return max(abs(v - base) for v in values) / base if base else 0.0


def judge(store):
    rows = samples(store)
    warm = [r for r in rows if float(r["t_s"]) >= warmup_minutes * 60]
    if not warm:
        return rows, None
    rss = [int(r["rss_kib"]) for r in warm]
    fds = [int(r["fds"]) for r in warm]
    anon = [int(r["anon_kib"]) for r in warm if r.get("anon_kib")]
    third = max(1, len(rss) // 3)
    return rows, {
        # A leak shows as a climb from the first third to the last; load swings do not.
        "rss_early": statistics.median(rss[:third]), "rss_late": statistics.median(rss[-third:]),
        "fds_early": statistics.median(fds[:third]), "fds_late": statistics.median(fds[-third:]),
        "rss_base": rss[0], "rss_min": min(rss), "rss_max": max(rss), "rss_last": rss[-1],
        "rss_spread": spread(rss, rss[0]),
        "fds_base": fds[0], "fds_min": min(fds), "fds_max": max(fds), "fds_last": fds[-1],
        "fds_spread": spread(fds, fds[0]),
        "anon": (anon[0], min(anon), max(anon), anon[-1], spread(anon, anon[0])) if anon else None,
    }


lines = []
w = lines.append
w("# Soak: an hour-long load, looking for leaks")
w("")
w(env["SOAK_PROVENANCE"])
w("")
w(f"- machine: {env['SOAK_NPROC']} CPUs, shared by floodgate, the load "
  "generator, redis-server and whatever else ran on the host (the *load* column is the host's "
  "1-minute load average)")
w(f"- **this run: {minutes} min per store** (`scripts/soak.sh --minutes {minutes}`"
  + ("; the script's default is an hour per store" if minutes != 60 else "") + ")")
w(f"- load: first the peak (closed loop, {env['SOAK_CONCURRENCY']} in flight, "
  f"{env['SOAK_PEAK_SECONDS']} s), then open loop at a fraction of it (the *soak req/s* column; "
  f"half unless `BENCH_SOAK_FRACTION` says otherwise): each minute one loadgen run of "
  "six 10 s stages, 19 calls in 20 on `generic_key=soak, client_id=m<minute>-<key>` with "
  f"{int(env['SOAK_KEYS']):,} keys drawn uniformly (new keys every minute: the key space churns "
  "and last minute's counters expire, one-minute fixed windows) and 1 in 20 on a hot key over "
  "its limit; a rewrite of the rules file (the limit moves by one) half-way through every "
  "minute, which floodgate reloads")
w(f"- Redis store: a redis-server of its own on loopback, `--redis-timeout-ms "
  f"{env['SOAK_REDIS_TIMEOUT_MS']}`, batching as by default (`--redis-batch-max 64`)")
w(f"- every 10 s: floodgate's RSS (`VmRSS`) with its two parts, anonymous (`RssAnon`: the "
  "process's own memory, where a leak grows) and file-backed (`RssFile`: the pages of the "
  "binary and its libraries touched so far, which climb as code first runs and stop at the "
  "code's size), the calls being decided at that moment (`floodgate_calls_in_flight`: a "
  "backlog's calls live in the anonymous part), and open file descriptors (`/proc/PID/fd`), the "
  "stage's client-side p99 and its ratio to the median p99 of the first minute, and for Redis "
  "its key count and `used_memory`")
w(f"- **flat** means: after the warm-up (the first {warmup_minutes} min), RSS and descriptors "
  f"stay within {FLAT:.0%} of their first sample after it. p99 is reported, not judged: the "
  "host drifts (other work on the shared CPUs shows up as tail latency)")
w("")

w("## Summary")
w("")
w("| store | peak req/s | soak req/s | calls | errors | shed | reloads done / taken | RSS after warm-up (first → min–max → last) | RSS spread | RSS median, first → last third | anonymous part (first → min–max → last) · spread | fds (first → min–max → last) | fds spread | flat | settled (minute medians) | p99 first minute | p99 ratio, median (max) |")
w("|---|--:|--:|--:|--:|--:|--:|---|--:|---|---|---|--:|---|---|--:|--:|")
details = []
for store in stores:
    peak, rate, loads_before, loads_after, reloads = open(f"{work}/{store}/summary.txt").read().split()
    taken = int(float(loads_after)) - int(float(loads_before))
    st = stages(store)
    calls = sum(f["completed"] for _, _, f in st)
    errors = sum(f["error"] for _, _, f in st)
    shed = sum(f["shed"] for _, _, f in st)
    first = [f["p99_us"] for m, _, f in st if m == 1 and f["p99_us"]]
    base = statistics.median(first) if first else None
    ratios = [f["p99_us"] / base for _, _, f in st if base and f["p99_us"]]
    rows, verdict = judge(store)
    if verdict:
        flat = verdict["rss_spread"] <= FLAT and verdict["fds_spread"] <= FLAT
        settle = settle_verdict(rows, minutes)
        rss = (f"{verdict['rss_base'] / 1024:.1f} → {verdict['rss_min'] / 1024:.1f}–"
               f"{verdict['rss_max'] / 1024:.1f} → {verdict['rss_last'] / 1024:.1f} MiB")
        fds = f"{verdict['fds_base']} → {verdict['fds_min']}–{verdict['fds_max']} → {verdict['fds_last']}"
        if verdict["anon"]:
            a_first, a_min, a_max, a_last, a_spread = verdict["anon"]
            anon = (f"{a_first / 1024:.1f} → {a_min / 1024:.1f}–{a_max / 1024:.1f} → "
                    f"{a_last / 1024:.1f} MiB · {a_spread:.1%}")
        else:
            anon = "–"
        w(f"| {store} | {float(peak):,.0f} | {int(rate):,} | {calls:,} | {errors:,} | {shed:,} | {reloads} / {taken} "
          f"| {rss} | {verdict['rss_spread']:.1%} "
          f"| {verdict['rss_early'] / 1024:.1f} → {verdict['rss_late'] / 1024:.1f} MiB "
          f"({verdict['rss_late'] / verdict['rss_early'] - 1:+.1%}) "
          f"| {anon} | {fds} | {verdict['fds_spread']:.1%} "
          f"| {'**yes**' if flat else '**no**'} "
          f"| after {settle[0]}: {'**yes**' if settle[1] else '**no**'} "
          f"| {base / 1000 if base else 0:.2f} ms "
          f"| {statistics.median(ratios) if ratios else 0:.2f}× ({max(ratios) if ratios else 0:.2f}×) |")
    else:
        w(f"| {store} | {float(peak):,.0f} | {int(rate):,} | {calls:,} | {errors:,} | {shed:,} | {reloads} / {taken} "
          "| – | – | – | – | – | – | no samples after the warm-up | – | – | – |")
    details.append((store, st, base, rows))
w("")
w(f"*settled (minute medians)*: the first minute from which every later minute's median RSS "
  f"and median descriptors stay within {FLAT:.0%} of that minute's, and whether that came "
  f"within the first {SETTLE_WITHIN:.0%} of the run: the warm-up read from the run rather "
  "than fixed. A leak never settles; a store growing its tables to the key space's high-water "
  "settles once it is there, and one sample caught in a burst moves its minute's median "
  "little. *flat* judges every sample after the fixed warm-up.")
w("")
w("*RSS median, first → last third*: the medians of the first and the last third of the "
  "samples after the warm-up; a leak climbs from one to the other, while the swings of a "
  "loaded host (requests queued in floodgate while it waits for a CPU) come and go.")
w("")
w("*reloads done / taken*: rewrites of the rules file, and the rise of "
  "`floodgate_config_load_success_total` over the soak (a rewrite may land while the previous "
  "one is being read: the watcher then loads once for both). *errors*: calls that failed or "
  "timed out at the client (2 s); *shed*: calls due while all 2 000 of loadgen's slots were "
  "taken, not sent (the load was more than the host could answer on time).")
w("")

for store, st, base, rows in details:
    w(f"## {store}: every 10 s")
    w("")
    has_redis = any(r["redis_keys"] for r in rows)
    head = "| t (s) | RSS MiB | anon MiB | file MiB | calls in flight | fds | p99 ms | p99 ratio | req/s | errors |"
    rule = "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
    if has_redis:
        head += " Redis keys | Redis used MiB |"
        rule += "--:|--:|"
    head += " load |"
    rule += "--:|"
    w(head)
    w(rule)
    for row in rows:
        found = stage_at(st, float(row["t_s"]))
        stage = found[2] if found else None
        p99 = stage["p99_us"] if stage else None
        part = lambda name: f"{int(row[name]) / 1024:.1f}" if row.get(name) else "–"
        cells = [f"{float(row['t_s']):.0f}", f"{int(row['rss_kib']) / 1024:.1f}",
                 part("anon_kib"), part("file_kib"), row.get("in_flight") or "–", row["fds"],
                 f"{p99 / 1000:.2f}" if p99 else "–",
                 f"{p99 / base:.2f}×" if p99 and base else "–",
                 f"{stage['achieved_rps']:,.0f}" if stage else "–",
                 f"{stage['error']:,}" if stage else "–"]
        if has_redis:
            cells += [row["redis_keys"] or "–",
                      f"{int(row['redis_used_kib']) / 1024:.1f}" if row["redis_used_kib"] else "–"]
        cells.append(row["load1"])
        w("| " + " | ".join(cells) + " |")
    w("")
    w("Each sample is shown with the 10 s stage that was running when it was taken (the "
      "sampler starts with the first minute's load; a sample takes a little over 10 s, so now "
      "and then a stage has two samples or none).")
    w("")

w("## Reproduce")
w("")
w("```")
w("scripts/soak.sh                  # an hour per store")
w("scripts/soak.sh --minutes 10     # shorter; --store memory|redis|both")
w("```")

with open(out, "w") as fh:
    fh.write("\n".join(lines) + "\n")
print(f"soak: wrote {out}", file=sys.stderr)
