"""Do the faster replay modes keep the exact replay's peak RSS? (issue 47: within 3%.)

One trace (record it with `bench_replay_fidelity.py record`), replayed under glibc,
jemalloc and tcmalloc in each mode `replay` offers, against the exact replay (the
recorded timing at --speed 1, one call at a time in the recorded order), --repeats
each. The runs go round by round (every mode and allocator once, then again), so a host
whose load changes weighs on all alike and a run cut short still has whole rounds.

`run` prints one JSON line per replay (append them to a file); `table` reads such files
and prints, per mode and allocator, the median peak heap RSS over the exact replay's,
whether it is within the tolerance, the spread of the exact replay's own repeats beside
it (a ratio inside that spread is not told from 1), the median wall time over the
recorded time, and the glibc/jemalloc RSS/live ratio of each mode beside the live
servers' (the issue's MyRocks IO-bound figures).

    .venv/bin/python bench/bench_replay_modes.py run --trace T --repeats 3 >> modes.jsonl
    .venv/bin/python bench/bench_replay_modes.py table modes.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from mallocbench.patterns.experiment import make_setup
from mallocbench.replay import runner
from mallocbench.replay import trace as tracemod

ALLOCATORS = ("glibc", "jemalloc", "tcmalloc")
# name: (timing, speed, order); the first is the exact replay
MODES: dict[str, tuple[str, float, str]] = {
    "exact": ("recorded", 1.0, "recorded"),
    "speed 6": ("recorded", 6.0, "recorded"),
    "batched": ("recorded", 1.0, "batched"),
    "speed 6 batched": ("recorded", 6.0, "batched"),
    "threads": ("recorded", 1.0, "threads"),
    "timing none": ("none", 1.0, "recorded"),
}
TOLERANCE = 0.03
# RSS/live of live servers, MyRocks IO-bound (issue 47): the order a replay should keep
LIVE_RSS_OVER_LIVE = {"glibc": 2.16, "jemalloc": 1.21, "tcmalloc": 1.09}


def run(args: argparse.Namespace) -> None:
    recorded = float(tracemod.check(args.trace).data["duration_s"])
    modes = args.modes.split(",")
    for repeat in range(args.repeats):
        for mode in modes:
            timing, speed, order = MODES[mode]
            for allocator in ALLOCATORS:
                setup = make_setup("bench", allocator, allocator)
                timeout = runner.replay_timeout(recorded, speed, timing)
                one = runner.run_once(setup, args.trace, timing, speed, repeat, timeout, order)
                data = one.data
                line = {
                    "mode": mode,
                    "allocator": allocator,
                    "repeat": repeat,
                    "status": one.status,
                    "error": one.error,
                    "peak_heap_rss": data.get("peak_heap_rss"),
                    "rss_over_live": data.get("rss_over_live"),
                    "wall_s": data.get("wall_s"),
                    "recorded_s": recorded,
                    "load_1min": float(Path("/proc/loadavg").read_text().split()[0]),
                }
                print(json.dumps(line), flush=True)


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [float(r[key]) for r in runs if r.get(key) is not None and r["status"] == "ok"]
    return statistics.median(values) if values else None


def table(args: argparse.Namespace) -> None:
    lines = [json.loads(x) for f in args.files for x in Path(f).read_text().splitlines() if x]
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for line in lines:
        by.setdefault((line["mode"], line["allocator"]), []).append(line)
    print("| mode | allocator | repeats | peak heap RSS (MiB, median) | ratio to exact | "
          "within 3% | exact's own spread | replay wall / recorded |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for mode in MODES:
        for allocator in ALLOCATORS:
            runs = by.get((mode, allocator), [])
            exact = by.get(("exact", allocator), [])
            peak, base = _median(runs, "peak_heap_rss"), _median(exact, "peak_heap_rss")
            if peak is None or base is None:
                continue
            ok_exact = [float(r["peak_heap_rss"]) for r in exact if r["status"] == "ok"]
            spread = (max(ok_exact) - min(ok_exact)) / base if len(ok_exact) > 1 else 0.0
            ratio = peak / base
            wall = _median(runs, "wall_s")
            recorded = float(runs[0]["recorded_s"])
            within = "yes" if abs(ratio - 1) <= TOLERANCE else "no"
            print(f"| {mode} | {allocator} | {sum(r['status'] == 'ok' for r in runs)} | "
                  f"{peak / 2**20:.1f} | {ratio:.3f} | {within if mode != 'exact' else '-'} | "
                  f"{spread:.1%} | {wall / recorded if wall else float('nan'):.2f} |")  # fmt: skip
    print()
    print("| mode | glibc RSS/live | jemalloc RSS/live | tcmalloc RSS/live | glibc/jemalloc |")
    print("|---|---|---|---|---|")
    live = LIVE_RSS_OVER_LIVE
    print(f"| live servers (issue 47) | {live['glibc']} | {live['jemalloc']} | "
          f"{live['tcmalloc']} | {live['glibc'] / live['jemalloc']:.2f} |")  # fmt: skip
    for mode in MODES:
        ratios = {a: _median(by.get((mode, a), []), "rss_over_live") for a in ALLOCATORS}
        if any(v is None for v in ratios.values()):
            continue
        g, j, t = (float(ratios[a] or 0) for a in ALLOCATORS)
        print(f"| {mode} | {g:.2f} | {j:.2f} | {t:.2f} | {g / j:.2f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="phase", required=True)
    p = sub.add_parser("run")
    p.add_argument("--trace", type=Path, required=True)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--modes", default=",".join(MODES))
    p = sub.add_parser("table")
    p.add_argument("files", nargs="+")
    args = parser.parse_args()
    if args.phase == "run":
        run(args)
    else:
        table(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
