"""Harness overhead: QPS with the memory probes on versus off, in one run.

The probes are everything sampled while a cell runs: /proc memory every second, the peak
sampler thread and the server's own memory counters over a kept connection. One private
server, one step, the ratio QPS(probes on) / QPS(off) with its 95% interval, the target
at 0.99 or better and an interval no wider than 2 points. Absolute QPS on a shared
2-core machine means little; the ratio within one run is what this measures.

Two designs (--grain):

- seconds (the default): one long sysbench run; the probes are switched on or off for
  each second, in pairs of seconds whose order is drawn at random (seeded), so each
  "on" second is compared with its neighbour. Per-second throughput here drifts slowly
  (adjacent seconds correlate at +0.3 to +0.7), and the pairs cancel that drift. Pairs
  are grouped into batches of --batch pairs; batch means are nearly independent even
  though neighbouring seconds are not, and they are the blocks of the paired interval.
- runs: runs of --seconds alternate on/off (on off off on ...), each a separate sysbench
  run with its first second dropped, as a cell's slices are. Whole runs vary by 6-10%
  on this machine, so a 2-point interval needs a couple of hundred rounds.

    .venv/bin/python bench/bench_probe_overhead.py [--grain seconds] [--minutes 10]
    .venv/bin/python bench/bench_probe_overhead.py --grain runs [--rounds 20] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
from pathlib import Path

from mallocbench import allocators
from mallocbench.analysis import stats
from mallocbench.probes import process as proc_probe
from mallocbench.probes.server import ServerMemoryProbe
from mallocbench.run.experiment import Dataset
from mallocbench.run.measure import measure
from mallocbench.servers import engines
from mallocbench.servers.mariadb import PrivateServer, ServerConfig, find_build
from mallocbench.servers.mariadb.dataset import golden_datadir
from mallocbench.workloads.catalogue import Step, step_from_label
from mallocbench.workloads.sysbench import Interval, Sysbench

TARGET = 0.99
MAX_WIDTH = 2.0  # points


class SwitchedProbes:
    """The probes of `measure`, switched on and off second by second in one sysbench run.

    While on, a sampler thread reads the server's memory as `PeakSampler` does, and each
    reported second is followed by the per-second reads `measure` makes (/proc and the
    server's counters): the same work, at the same rates, as in a measured cell.
    """

    def __init__(self, pid: int, server_probe: ServerMemoryProbe, interval_s: float = 0.25):
        self.pid = pid
        self.server_probe = server_probe
        self.interval_s = interval_s
        self.on = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="switched-peaks", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self.on.is_set():
                proc_probe.read_memory(self.pid)
            self._stop.wait(self.interval_s)

    def per_second_reads(self) -> None:
        proc_probe.read_memory(self.pid)
        self.server_probe.read()

    def __enter__(self) -> SwitchedProbes:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def pair_orders(pairs: int, seed: int) -> list[bool]:
    """Probe state per second: each pair of seconds is (on, off) or (off, on) at random."""
    rng = random.Random(seed)
    order: list[bool] = []
    for _ in range(pairs):
        first = rng.random() < 0.5
        order += [first, not first]
    return order


def by_seconds(
    server: PrivateServer, sysbench: Sysbench, step: Step, args: argparse.Namespace
) -> tuple[dict[int, float], dict[int, float], dict[str, object]]:
    """Batch means of the off and on seconds, keyed by batch, from one long run."""
    pairs = int(args.minutes * 60) // 2
    states = pair_orders(pairs, args.seed)
    seen: list[tuple[bool, float]] = []
    with SwitchedProbes(server.pid, ServerMemoryProbe(server)) as probes:

        def next_second(interval: Interval) -> None:
            # Second k (from 0) has just been reported; the state set now holds for k+1.
            # Second 0 is sysbench connecting its clients and is not counted.
            k = len(seen)
            if k >= 1:
                seen[-1] = (seen[-1][0], interval.qps)
            if k < len(states):
                state = states[k]
                probes.on.set() if state else probes.on.clear()
                if state:
                    probes.per_second_reads()
                seen.append((state, float("nan")))

        sysbench.run(step, args.threads, 2 * pairs + 2, on_interval=next_second)
    # seen[k] is (state, qps of the second that state held for).
    done = [q for q in seen if q[1] == q[1]]
    batch = args.batch
    off: dict[int, float] = {}
    on: dict[int, float] = {}
    diffs: list[float] = []
    for p in range(len(done) // 2):
        (s1, q1), (_, q2) = done[2 * p], done[2 * p + 1]
        q_on, q_off = (q1, q2) if s1 else (q2, q1)
        b = p // batch
        on[b] = on.get(b, 0.0) + q_on
        off[b] = off.get(b, 0.0) + q_off
        diffs.append(q_on / q_off)
    full = {b for b in on if (b + 1) * batch <= len(done) // 2}
    extra: dict[str, object] = {
        "pairs": len(diffs),
        "batches": len(full),
        "second_cv_off": round(_cv([q for s, q in done if not s]), 4),
        "pair_ratio_sd": round(statistics.pstdev(diffs), 4) if len(diffs) > 1 else None,
    }
    return {b: off[b] for b in full}, {b: on[b] for b in full}, extra


def by_runs(
    server: PrivateServer, sysbench: Sysbench, step: Step, args: argparse.Namespace
) -> tuple[dict[int, float], dict[int, float], dict[str, object]]:
    """Mean QPS of each on and off run (first second dropped); runs 2k and 2k+1 a block."""
    qps: dict[bool, list[float]] = {True: [], False: []}
    order = [i % 4 in (0, 3) for i in range(2 * args.rounds)]
    server_probe = ServerMemoryProbe(server)
    for probes in order:
        out = measure(
            server.pid, sysbench, step, args.threads, args.seconds, probes,
            server_probe=server_probe,
        )  # fmt: skip
        seconds = [i.qps for i in out.output.intervals[1:]]
        rate = statistics.fmean(seconds) if seconds else out.output.qps
        qps[probes].append(rate)
        print(f"probes {'on ' if probes else 'off'}  {rate:10.0f} qps", flush=True)
    extra = {"rounds": args.rounds, "run_cv_off": round(_cv(qps[False]), 4)}
    return dict(enumerate(qps[False])), dict(enumerate(qps[True])), extra


def _cv(values: list[float]) -> float:
    return statistics.pstdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grain", choices=["seconds", "runs"], default="seconds")
    parser.add_argument("--minutes", type=float, default=10, help="seconds grain: run length")
    parser.add_argument("--batch", type=int, default=20, help="seconds grain: pairs per batch")
    parser.add_argument("--seed", type=int, default=1, help="seconds grain: pair orders")
    parser.add_argument("--rounds", type=int, default=20, help="runs grain: runs per mode")
    parser.add_argument("--seconds", type=float, default=5.0, help="runs grain: s per run")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--step", default="point-query", help="a cheap step shows overhead most")
    args = parser.parse_args()

    build = find_build()
    engine = engines.get("innodb")
    dataset = Dataset(tables=2, rows=10000, cache_bytes=128 << 20)
    golden = golden_datadir(build, engine, dataset)
    step = step_from_label(args.step)
    with tempfile.TemporaryDirectory(prefix="mb-bench-") as tmp:
        config = ServerConfig(engine, dataset.cache_bytes, allocators.get("glibc"))
        with PrivateServer(build, Path(tmp), config) as server:
            server.copy_datadir_from(golden)
            server.start()
            sysbench = Sysbench(
                str(server.sysbench_options), dataset.tables, dataset.rows, "InnoDB"
            )
            sysbench.run(step, args.threads, 10)  # warm the buffer pool and the step
            design = by_seconds if args.grain == "seconds" else by_runs
            off, on, extra = design(server, sysbench, step, args)
    (paired,) = stats.blocked_ratios(off, {"on": on}).values()
    ratio, width = paired.ratio, 100 * (paired.high - paired.low)
    if width > MAX_WIDTH:
        verdict = "inconclusive: interval wider than 2 points; run longer"
    elif paired.low >= TARGET:
        verdict = "ok"
    elif paired.high < TARGET:
        verdict = "overhead above target"
    else:
        verdict = "inconclusive: the interval straddles the target"
    record = {
        "benchmark": "probe_overhead",
        "grain": args.grain,
        "ratio_on_over_off": round(ratio, 4),
        "interval": [round(paired.low, 4), round(paired.high, 4)],
        "interval_width_points": round(width, 2),
        "target": TARGET,
        **extra,
        "verdict": verdict,
    }
    print(json.dumps(record))
    return 1 if verdict == "overhead above target" else 0


if __name__ == "__main__":
    sys.exit(main())
