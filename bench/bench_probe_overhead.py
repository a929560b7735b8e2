"""Harness overhead: QPS with the memory probes on versus off, in one run.

The probes are everything sampled while a cell runs: /proc memory every second, the peak
sampler thread and the server's own memory counters over a kept connection.
One private server, one step; runs alternate on/off (on off off on on off ...) so machine
drift cancels. Each run is measured like a slice of the interleaved design (its first
second dropped), each adjacent on/off pair is a block, and the verdict is the paired
ratio QPS(probes on) / QPS(off) with its 95% interval (analysis.stats.blocked_ratios),
the target at 0.99 or better and an interval no wider than 2 points. Absolute QPS on a
shared 2-core machine means little; the ratio within one run is what this measures.

    .venv/bin/python bench/bench_probe_overhead.py [--rounds 20] [--seconds 5] [--threads 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from mallocbench import allocators
from mallocbench.analysis import stats
from mallocbench.dataset import golden_datadir
from mallocbench.experiment import Dataset
from mallocbench.measure import measure
from mallocbench.probes.server import ServerMemoryProbe
from mallocbench.servers import engines
from mallocbench.servers.mariadb import PrivateServer, ServerConfig, find_build
from mallocbench.workloads.catalogue import step_from_label
from mallocbench.workloads.sysbench import Sysbench

TARGET = 0.99
MAX_WIDTH = 2.0  # points


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="runs per mode")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per run")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--step", default="point-query", help="a cheap step shows overhead most")
    args = parser.parse_args()

    build = find_build()
    engine = engines.get("innodb")
    dataset = Dataset(tables=2, rows=10000, cache_bytes=128 << 20)
    golden = golden_datadir(build, engine, dataset)
    step = step_from_label(args.step)
    qps: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="mb-bench-") as tmp:
        config = ServerConfig(engine, dataset.cache_bytes, allocators.get("glibc"))
        with PrivateServer(build, Path(tmp), config) as server:
            server.copy_datadir_from(golden)
            server.start()
            sysbench = Sysbench(
                str(server.sysbench_options), dataset.tables, dataset.rows, "InnoDB"
            )
            sysbench.run(step, args.threads, 2)  # warm the buffer pool
            order = [i % 4 in (0, 3) for i in range(2 * args.rounds)]
            server_probe = ServerMemoryProbe(server)
            for probes in order:
                out = measure(
                    server.pid,
                    sysbench,
                    step,
                    args.threads,
                    args.seconds,
                    probes,
                    server_probe=server_probe,
                )
                seconds = [i.qps for i in out.output.intervals[1:]]
                rate = statistics.fmean(seconds) if seconds else out.output.qps
                qps[probes].append(rate)
                print(f"probes {'on ' if probes else 'off'}  {rate:10.0f} qps", flush=True)
    # Runs 2k and 2k+1 hold one "on" and one "off": a block.
    on = dict(enumerate(qps[True]))
    (paired,) = stats.blocked_ratios(dict(enumerate(qps[False])), {"on": on}).values()
    ratio, width = paired.ratio, 100 * (paired.high - paired.low)
    spread = statistics.pstdev(qps[False]) / statistics.mean(qps[False])
    if width > MAX_WIDTH:
        verdict = "inconclusive: interval wider than 2 points; add --rounds"
    elif paired.low >= TARGET:
        verdict = "ok"
    elif paired.high < TARGET:
        verdict = "overhead above target"
    else:
        verdict = "inconclusive: the interval straddles the target"
    print(
        json.dumps(
            {
                "benchmark": "probe_overhead",
                "ratio_on_over_off": round(ratio, 4),
                "interval": [round(paired.low, 4), round(paired.high, 4)],
                "interval_width_points": round(width, 2),
                "target": TARGET,
                "noise_cv_off": round(spread, 4),
                "rounds": args.rounds,
                "verdict": verdict,
            }
        )
    )
    return 1 if verdict == "overhead above target" else 0


if __name__ == "__main__":
    sys.exit(main())
