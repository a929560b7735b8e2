"""A long recording in segments, replayed under glibc, jemalloc and tcmalloc (issue 47).

A private InnoDB server under a sysbench step (--threads clients) is recorded for
--minutes (30; --quick: 3) into a segmented trace (a segment every --segment-seconds),
then replayed whole, under each allocator once, at --speed with the time-based knobs
scaled, in the batched order, through `mallocbench replay --out` (so the figures are the
product's own). One JSON line, then a closing note:
- the trace: calls, bytes, segments, bytes a call, MB an hour;
- each replay: the replayer's own peak memory (its bookkeeping, left out of the RSS) and
  the process's, its wall time against the recorded time;
- the growth reading of each setup (slopes per hour with their intervals, and the words
  the report prints).

    .venv/bin/python bench/bench_long_record.py [--quick] [--minutes 30] [--speed 6]
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import server_under_load

from mallocbench.native import shim_path
from mallocbench.replay import control
from mallocbench.replay import trace as tracemod
from mallocbench.run.experiment import Dataset

MIB = 1 << 20
ALLOCATORS = "glibc,jemalloc,tcmalloc"


def record(args: argparse.Namespace, tmp: Path, out: Path) -> dict[str, Any]:
    dataset = Dataset(tables=args.tables, rows=args.rows, cache_bytes=128 * MIB)
    seconds = args.minutes * 60
    long = control.Segmenting(256 * MIB, args.segment_seconds, 0)
    began = time.monotonic()
    extra = {"record_shim": str(shim_path())}  # in front of glibc's malloc
    with server_under_load(
        tmp, "innodb", dataset, extra, "glibc", args.step, args.threads, 5, seconds + 20
    ) as server:
        outcome = control.record(server.pid, seconds, out, long=long)
    info = tracemod.check(out)
    calls, size = int(info.data["calls_present"]), tracemod.trace_bytes(out)
    recorded = float(info.data["duration_s"])
    return {
        "status": outcome.closing,
        "recorded_s": round(recorded, 1),
        "calls": calls,
        "calls_per_s": round(calls / recorded),
        "threads": info.data["threads"],
        "bytes": size,
        "segments": len(tracemod.segments(out)),
        "bytes_per_call": round(size / calls, 2),
        "mb_per_hour": round(size / 1e6 / recorded * 3600),
        "ideal_peak_live_mib": round(int(info.data["ideal_peak_live"]) / MIB, 1),
        "record_wall_s": round(time.monotonic() - began),
    }


def replay(args: argparse.Namespace, trace: Path, out: Path, recorded_s: float) -> dict[str, Any]:
    command = [sys.executable, "-m", "mallocbench.cli", "replay", str(trace), "--allocators",
               ALLOCATORS, "--repeats", "1", "--speed", f"{args.speed:g}", "--order", "batched",
               "--out", str(out)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-500:]}
    results = json.loads((out / "results.json").read_text())
    per: dict[str, Any] = {}
    for run in results["metadata"]["replay"]["runs"]:
        value = run["data"]
        per[run["setup"]] = {
            "wall_s": round(value["wall_s"], 1),
            "wall_over_recorded": round(value["wall_s"] / recorded_s, 3),
            "bookkeeping_peak_mib": round(value["bookkeeping_peak"] / MIB, 1),
            "replayer_rss_mib": round(value["baseline_rss"] / MIB, 1),
            "peak_heap_rss_mib": round(value["peak_heap_rss"] / MIB, 1),
        }
    with (out / "replay.csv").open() as f:
        for row in csv.DictReader(f):
            per.setdefault(row["setup"], {})["growth"] = {
                k: row[k] for k in row if k.startswith(("rss_", "live_", "retained_", "growth_"))
            }
    report = (out / "report.md").read_text().splitlines()
    words = [ln for ln in report if ln.startswith(("Under ", "Slopes per hour"))]
    return {"setups": per, "growth_words": words}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="3 minutes, a segment a minute")
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--segment-seconds", type=float, default=300)
    p.add_argument("--speed", type=float, default=6)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--step", default="read-write")
    p.add_argument("--tables", type=int, default=4)
    p.add_argument("--rows", type=int, default=20000)
    p.add_argument("--keep", type=Path, help="keep the trace and the replay's output here")
    p.add_argument("--trace", type=Path, help="replay this trace (recorded by --keep) again")
    args = p.parse_args()
    if args.quick:
        args.minutes, args.segment_seconds = 3, 60
    with tempfile.TemporaryDirectory(prefix="bench-long-record-") as scratch:
        # Half an hour of recording is too dear to lose with a failed replay: --keep
        # holds it, and --trace replays it again without recording.
        tmp = Path(scratch)
        place = args.keep or tmp
        place.mkdir(parents=True, exist_ok=True)
        if args.trace:
            trace = args.trace
            rec = {"recorded_s": float(tracemod.check(trace).data["duration_s"])}
        else:
            trace = place / "long.mbt"
            rec = record(args, tmp, trace)
        print(json.dumps({"record": rec}), file=sys.stderr, flush=True)
        rep = replay(args, trace, place / "replay", rec["recorded_s"])
    print(json.dumps({"args": vars(args), "record": rec, "replay": rep}, indent=1, default=str))


if __name__ == "__main__":
    main()
