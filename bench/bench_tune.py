"""The knob search on a real MyRocks trace: does `tune` find the directions the seeds and
the allocators' docs report (fewer glibc arenas, jemalloc decay 0: lower RSS)?

Records --seconds of a sysbench step on a private MyRocks server whose block cache is
small against its data (IO-bound), as bench_replay_steadiness does (or takes --trace),
then runs `mallocbench tune` with --budget on glibc and jemalloc, and replays the two
textbook settings against their defaults (--repeats each, the same portion of the trace
and speed as the tune's trials) for the direction check. Prints one JSON line: settings
searched per allocator, how they were measured, the front with intervals, the choices,
the two direction ratios with their intervals, and the load average (before the tune,
after it, after the direction check).

    .venv/bin/python bench/bench_tune.py [--budget 15m] [--seconds 60] [--trace T]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_replay_steadiness import record

from mallocbench import allocators
from mallocbench.analysis import stats
from mallocbench.tune.evaluate import ReplayEvaluator
from mallocbench.tune.objectives import METRICS

DIRECTIONS = {
    "glibc arena_max=1": ("glibc", {"arena_max": "1"}),
    "jemalloc decay 0": ("jemalloc", {"dirty_decay_ms": "0", "muzzy_decay_ms": "0"}),
}


def direction(
    trace: Path, allocator: str, setting: dict[str, str], repeats: int, doc: dict[str, Any]
) -> Any:
    """The textbook setting against its default, replayed as the tune's trials were (the
    same portion and speed, time-based knobs scaled the same way), interleaved."""
    facts = doc["evaluation"]
    evaluator = ReplayEvaluator(
        trace, facts["timing"], facts["speed"], facts["trace_s"], facts["portion_s"]
    )
    library = allocators.get(allocator)
    runs: dict[str, list[dict[str, float]]] = {"base": [], "tuned": []}
    for _ in range(repeats):
        runs["base"].append(evaluator(library, {}))
        runs["tuned"].append(evaluator(library, setting))
    out = {}
    for key in (METRICS["rss"].key, "cpu_s"):
        a = [r[key] for r in runs["tuned"]]
        b = [r[key] for r in runs["base"]]
        ratio, low, high = stats.ratio_ci(a, b)
        out[key] = [round(ratio, 3), round(low, 3), round(high, 3)]
    return out


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def front_summary(doc: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for result in doc["allocators"]:
        out[result["allocator"]] = {
            "settings_searched": result["trials"],
            "chosen": result["chosen"],
            "front": [
                {
                    "point": p["label"],
                    "setting": p["setting"],
                    "on_front": p["on_front"],
                    **{
                        f"{name}_vs_default": [round(v["ratio"], 3), v["low"], v["high"]]
                        for name, v in p["versus_default"].items()
                    },
                }
                for p in result["points"]
            ],
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", default="15m")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--step", default="read-write")
    parser.add_argument("--engine", default="myrocks")
    parser.add_argument("--tables", type=int, default=2)
    parser.add_argument("--rows", type=int, default=50000)
    parser.add_argument("--cache", default="16M", help="block cache, small: IO-bound")
    parser.add_argument("--speed", type=float, default=1.0, help="replay N times faster")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--trace", type=Path, help="tune this trace instead of recording")
    parser.add_argument("--out", type=Path, help="keep the tune's output here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mb-bench-tune-") as name:
        tmp = Path(name)
        tmp.chmod(0o755)
        trace = args.trace or tmp / "server.mbt"
        if args.trace is None:
            record(args, trace, tmp)
        out = args.out or tmp / "tune"
        command = [sys.executable, "-m", "mallocbench.cli", "tune", str(trace), "--allocators",
                   "glibc,jemalloc", "--budget", args.budget, "--speed", str(args.speed),
                   "--repeats", str(args.repeats), "--out", str(out), "--engine", args.engine,
                   "--json"]  # fmt: skip
        load_before = loadavg()
        started = time.monotonic()
        proc = subprocess.run(command, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            return proc.returncode
        doc = json.loads(proc.stdout)
        summary: dict[str, Any] = {
            "benchmark": "tune",
            "budget": args.budget,
            "tune_s": round(time.monotonic() - started, 1),
            "evaluator": doc["evaluator"],
            "load_average": [load_before, loadavg()],
        }
        summary.update(front_summary(doc))
        summary["directions"] = {
            label: direction(trace, allocator, setting, args.repeats, doc)
            for label, (allocator, setting) in DIRECTIONS.items()
        }
        summary["load_average"].append(loadavg())
        print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
