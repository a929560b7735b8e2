"""How fast the replayer goes: replay wall time over the trace's recorded time (issue 47's
target: at most 1/6 at --speed 6, so an hour replays in 10 minutes).

Each replayer binary given replays the same trace (or its first --until seconds) under
the same allocator, with the time-based knobs scaled as `replay` does, in turns (A B A B
...), --repeats each, so a host whose load changes weighs on both alike. One JSON line:
per binary the ratios, their median, calls/s and the load.

    .venv/bin/python bench/bench_replay_speed.py --trace T --until 60 \
        before=/tmp/mbreplay-before after=native/build/mbreplay
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from mallocbench import allocators
from mallocbench.allocators import knobs as allocator_knobs
from mallocbench.patterns.driver import clean_environment


def load_1min() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def replay_once(binary: str, args: argparse.Namespace) -> dict[str, Any]:
    allocator = allocators.get(args.allocator)
    env = clean_environment(allocator, allocator_knobs.at_speed(allocator, {}, args.speed))
    command = [binary, str(args.trace), "--timing", args.timing, "--speed", f"{args.speed:g}",
               "--order", args.order]  # fmt: skip
    if args.until:
        command += ["--until", f"{args.until:g}"]
    before = load_1min()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-300:]}
    data = json.loads(done.stdout)
    recorded = float(data["duration_s"])
    return {
        "wall_s": round(data["wall_s"], 2),
        "ratio": round(data["wall_s"] / recorded, 4),
        "calls_per_s": round(data["calls_per_s"]),
        "reader_cpu_s": round(data["reader_cpu_s"], 2),
        "cpu_s": round(data["cpu_s"], 2),
        "ops": data["ops"],
        # the replayer's whole CPU a call: its replay threads' (allocator included) and its
        # reader's; what the wall time would be on CPUs of its own
        "cpu_ns_per_call": round((data["cpu_s"] + data["reader_cpu_s"]) / data["ops"] * 1e9),
        "recorded_s": round(recorded, 2),
        "load_1min": [before, load_1min()],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binaries", nargs="+", help="NAME=PATH of an mbreplay build")
    parser.add_argument("--trace", type=Path, required=True)
    parser.add_argument("--until", type=float, default=0.0)
    parser.add_argument("--allocator", default="glibc")
    parser.add_argument("--speed", type=float, default=6.0)
    parser.add_argument("--timing", choices=("recorded", "none"), default="recorded")
    parser.add_argument("--order", choices=("recorded", "batched", "threads"), default="batched")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    named = dict(b.split("=", 1) for b in args.binaries)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in named}
    for repeat in range(args.repeats):
        for name, binary in named.items():
            one = replay_once(binary, args)
            runs[name].append(one)
            print(json.dumps({"repeat": repeat, "binary": name, **one}), file=sys.stderr)
    summary: dict[str, Any] = {
        "trace": str(args.trace),
        "until_s": args.until or None,
        "allocator": args.allocator,
        "speed": args.speed,
        "timing": args.timing,
        "order": args.order,
        "cpus": os.cpu_count(),
    }
    for name, series in runs.items():
        ratios = [r["ratio"] for r in series if "ratio" in r]
        cpu = [r["cpu_ns_per_call"] for r in series if "cpu_ns_per_call" in r]
        summary[name] = {
            "ratios": ratios,
            "median_ratio": statistics.median(ratios) if ratios else None,
            "median_cpu_ns_per_call": statistics.median(cpu) if cpu else None,
            "runs": series,
        }
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
