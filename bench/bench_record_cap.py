"""The recording shim's buffers with and without the cap, under the same load.

Two loads, each recorded in windows that alternate between no cap and --cap:
- server: a private InnoDB server under a sysbench step (--threads clients), recorded for
  --seconds per window, --rounds pairs of windows in one sysbench run;
- churn: tests/native/churn.c, --churn-threads threads calling malloc/realloc/free as fast
  as they can for --churn-seconds, faster than one writer compresses (the writer falling
  behind, on purpose), --rounds runs each way.
Per window: the shim's buffer peak and whole mapped peak (from the trace's end frame),
events recorded, events/s and the trace's status. Medians over the rounds, with the load
average beside them.

    .venv/bin/python bench/bench_record_cap.py [--cap 64M] [--seconds 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
from mallocbench.units import parse_size

HERE = Path(__file__).resolve().parent
MIB = 1 << 20


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def window_figures(trace: Path) -> dict[str, Any]:
    info = tracemod.check(trace)
    recorded = max(float(info.data["duration_s"]), 1e-3)
    end = info.data["end"]
    return {
        "buffer_peak_mib": round(int(end.get("buffer_peak", 0)) / MIB, 1),
        "shim_mapped_peak_mib": round(int(end.get("shim_mapped_peak", 0)) / MIB, 1),
        "events": info.data["events"],
        "events_per_s": round(info.data["events"] / recorded),  # while it recorded
        "status": info.status,
        "loadavg": loadavg(),
    }


def server_windows(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    dataset = Dataset(tables=2, rows=10000, cache_bytes=128 * MIB)
    caps = [0, args.cap] * args.rounds
    out = []
    total = len(caps) * (args.seconds + 2) + 10
    with server_under_load(
        tmp, "innodb", dataset, {}, str(shim_path()), args.step, args.threads, 3, total
    ) as server:
        time.sleep(2)
        for i, cap in enumerate(caps):
            trace = tmp / f"server-{i}.mbt"
            control.record(server.pid, args.seconds, trace, max_buffer=cap)
            row = {"load": "server", "cap_mib": cap // MIB or None}
            row |= window_figures(trace)
            print(json.dumps(row), file=sys.stderr)
            out.append(row)
            trace.unlink()
    return out


def churn_windows(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    exe = tmp / "churn"
    subprocess.run(
        ["cc", "-O1", "-std=c11", "-pthread", "-o", str(exe), str(HERE.parent / "tests" /
         "native" / "churn.c")],
        check=True,
    )  # fmt: skip
    out = []
    for i, cap in enumerate([0, args.cap] * args.rounds):
        trace, ctl = tmp / f"churn-{i}.mbt", tmp / f"ctl-{i}"
        env = dict(
            os.environ,
            LD_PRELOAD=str(shim_path()),
            MBRECORD_ARMED="1",
            MBRECORD_OUT=str(trace),
            MBRECORD_CONTROL=str(ctl),
            MBRECORD_MAX_BUFFER=str(cap),
        )
        proc = subprocess.run(
            [str(exe), f"{ctl}.status", str(args.churn_threads), str(args.churn_seconds)],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        calls = json.loads(proc.stdout)["calls"]
        row = {"load": "churn", "cap_mib": cap // MIB or None, "calls": calls}
        row |= window_figures(trace)
        print(json.dumps(row), file=sys.stderr)
        out.append(row)
        trace.unlink()
    return out


def medians(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    summary = []
    for load in sorted({r["load"] for r in rows}):
        for cap in sorted({r["cap_mib"] or 0 for r in rows}):
            mine = [r for r in rows if r["load"] == load and (r["cap_mib"] or 0) == cap]
            if not mine:
                continue
            summary.append(
                {
                    "load": load,
                    "cap_mib": cap or None,
                    "windows": len(mine),
                    "stopped": sum(r["status"].startswith("stopped") for r in mine),
                    **{
                        key: statistics.median(r[key] for r in mine)
                        for key in (
                            "buffer_peak_mib",
                            "shim_mapped_peak_mib",
                            "events",
                            "events_per_s",
                        )
                    },  # fmt: skip
                    "buffer_peak_range_mib": [
                        min(r["buffer_peak_mib"] for r in mine),
                        max(r["buffer_peak_mib"] for r in mine),
                    ],
                    "loadavg_range": [
                        min(r["loadavg"] for r in mine),
                        max(r["loadavg"] for r in mine),
                    ],
                }
            )
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", default="64M")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--step", default="point-query")
    parser.add_argument("--churn-threads", type=int, default=2)
    parser.add_argument("--churn-seconds", type=float, default=1.0)
    parser.add_argument("--skip-server", action="store_true")
    args = parser.parse_args()
    args.cap = parse_size(args.cap, "--cap")
    with tempfile.TemporaryDirectory(prefix="mb-bench-cap-") as name:
        tmp = Path(name)
        tmp.chmod(0o755)
        rows = churn_windows(args, tmp)
        if not args.skip_server:
            rows += server_windows(args, tmp)
    print(json.dumps({"benchmark": "record_cap", "windows": rows, "summary": medians(rows)},
                     indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
