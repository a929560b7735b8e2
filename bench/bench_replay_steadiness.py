"""Replay steadiness and speed: record a private server under load, replay it N times.

Records --seconds of a sysbench step (8 clients) on a private InnoDB server with the shim
preloaded, then replays the trace --replays times under each allocator with the recorded
timing and, unless --order threads, the recorded order of calls. Reports the trace's size
per minute, each allocator's peak-RSS CV over the replays (issue 28's target: <= 2%), its
RSS/live, and replay wall time over recording time (target: <= 1).

    .venv/bin/python bench/bench_replay_steadiness.py [--seconds 60] [--replays 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from common import server_under_load

from mallocbench import allocators
from mallocbench.native import shim_path
from mallocbench.patterns.experiment import make_setup
from mallocbench.replay import control, runner
from mallocbench.replay import trace as tracemod
from mallocbench.run.experiment import Dataset
from mallocbench.units import parse_size


def record(args: argparse.Namespace, out: Path, tmp: Path) -> None:
    dataset = Dataset(
        tables=args.tables, rows=args.rows, cache_bytes=parse_size(args.cache, "--cache")
    )
    with server_under_load(
        tmp, args.engine, dataset, {}, str(shim_path()), args.step, args.threads, 5,
        args.seconds + 10,
    ) as server:  # fmt: skip
        control.record(server.pid, args.seconds, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--replays", type=int, default=5)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--step", default="read-write")
    parser.add_argument("--allocators", default="glibc,jemalloc,tcmalloc")
    parser.add_argument("--engine", default="innodb")
    parser.add_argument("--tables", type=int, default=2)
    parser.add_argument("--rows", type=int, default=10000)
    parser.add_argument("--cache", default="128M", help="buffer pool / block cache")
    parser.add_argument(
        "--order",
        choices=runner.ORDERS,
        default="recorded",
        help="recorded: the threads' calls one at a time as recorded; threads: free-running",
    )
    parser.add_argument("--trace", type=Path, help="replay this trace instead of recording")
    parser.add_argument("--keep", type=Path, help="keep the recorded trace here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mb-bench-replay-") as name:
        tmp = Path(name)
        tmp.chmod(0o755)
        trace = args.trace or tmp / "server.mbt"
        if args.trace is None:
            record(args, trace, tmp)
            if args.keep is not None:
                shutil.copyfile(trace, args.keep)
        info = tracemod.check(trace)
        recorded_s = float(info.data["duration_s"])
        summary: dict[str, object] = {
            "benchmark": "replay_steadiness",
            "recorded_s": round(recorded_s, 1),
            "events": info.data["events"],
            "threads": info.data["threads"],
            "trace_mb_per_minute": round(info.data["bytes"] / 1e6 / recorded_s * 60, 2),
            "ideal_peak_live": info.data["ideal_peak_live"],
            "order": args.order,
        }
        for name in args.allocators.split(","):
            if not allocators.get(name, require_available=False).available:
                continue
            setup = make_setup("bench", name, name)
            runs = [
                runner.run_once(setup, trace, "recorded", 1.0, r, 600, args.order)
                for r in range(args.replays)
            ]
            peaks = [float(r.data["peak_heap_rss"]) for r in runs if r.status == "ok"]
            walls = [float(r.data["wall_s"]) for r in runs if r.status == "ok"]
            ratios = [float(r.data["rss_over_live"]) for r in runs if r.status == "ok"]
            summary[name] = {
                "ok": len(peaks),
                "peak_heap_rss_mib": round(statistics.fmean(peaks) / 2**20, 1) if peaks else None,
                "peak_rss_cv": round(statistics.stdev(peaks) / statistics.fmean(peaks), 4)
                if len(peaks) > 1
                else None,
                "rss_over_live": round(statistics.fmean(ratios), 3) if ratios else None,
                "replay_over_recording_time": round(max(walls) / recorded_s, 3) if walls else None,
            }
        print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
