"""How one server's throughput wanders under steady load, and whether the host explains it.

    .venv/bin/python bench/bench_wander.py [--seconds 300] [--split] --out DIR

One private server (glibc, InnoDB point-query, 8 clients, the verdict benches' dataset)
is measured for --seconds as one cell, its throughput sampled each second, while two
canaries (bench/native/canary.c) time fixed work by their own CPU clocks: an
L1-resident loop (the vCPU's speed) and a random walk over 64 MiB (memory latency,
which neighbours on the host move). With --split the server runs on CPU 1 and sysbench
on CPU 0, so server and clients never share a CPU.

Printed, as JSON lines:
- the aggregation curve, as calibrate measures it (the CV of T-second means), and each
  window's variance over what independent seconds would give (the 1 s variance / T).
  A ratio far above 1 at T = 20-30 s is wander that lasts as long as a block: more
  seconds in a start do not average it away, and a short calibration does not see it;
- each canary's spread, and its correlation with the windows' log QPS at T = 1, 10
  and 30 s (r; r squared is the share it explains). A host cause of the wander would show
  here, with a negative sign.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from common import Plan, emit, run

from mallocbench.analysis import noise

NATIVE = Path(__file__).resolve().parent / "native" / "canary.c"
WINDOWS_S = (1, 5, 10, 20, 30, 60)
EXPLAINED_AT_S = (1, 10, 30)


def build_canary(into: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("no C compiler: apt-get install gcc")
    binary = into / "canary"
    subprocess.run(
        [cc, "-O2", "-std=c11", "-Wall", "-Wextra", "-o", str(binary), str(NATIVE)], check=True
    )
    return binary


def clients_on(cpu: int, shim_dir: Path) -> None:
    """Every sysbench this process's runs start goes through a shim on PATH that execs
    the real one under taskset: its client threads inherit the CPU from birth, and
    nothing polls /proc beside the measurement."""
    real = shutil.which("sysbench")
    taskset = shutil.which("taskset")
    if real is None or taskset is None:
        raise SystemExit("--split needs sysbench and taskset (util-linux)")
    shim = shim_dir / "sysbench"
    shim.write_text(f'#!/bin/sh\nexec {taskset} -c {cpu} {real} "$@"\n')
    shim.chmod(0o755)
    os.environ["PATH"] = f"{shim_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def read_canary(path: Path) -> tuple[np.ndarray, np.ndarray]:
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    data = np.array([[float(t), float(v)] for t, v in rows if float(v) > 0])
    return data[:, 0], data[:, 1]


def window_means(values: np.ndarray, width: int) -> np.ndarray:
    usable = len(values) // width * width
    return values[:usable].reshape(-1, width).mean(axis=1)


def aggregation_curve(qps: list[float]) -> list[dict[str, float]]:
    """calibrate's curve (noise.aggregation_curve: the CV of k-second means), with each
    window's variance over what independent seconds would leave, (CV_k / CV_1)^2 k."""
    curve = noise.aggregation_curve(qps, WINDOWS_S)
    one = curve[0][1]
    return [
        {"window_s": k, "cv_pct": cv, "over_independent": (cv / one) ** 2 * k} for k, cv in curve
    ]


def explained(log_qps: np.ndarray, probe: np.ndarray) -> dict[str, float]:
    """Per window width, the correlation of the log QPS windows with the probe's log
    windows. A slower host makes it negative (more ns per step, fewer queries); a
    canary slowed by the server's own work on its CPU (caches it evicts) makes it
    positive, so the sign tells a host cause from the load's own doing."""
    out = {}
    for width in EXPLAINED_AT_S:
        q, p = window_means(log_qps, width), window_means(probe, width)
        if len(q) >= 5 and np.std(p) > 0:
            out[f"r_{width}s"] = float(np.corrcoef(q, p)[0, 1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--split", action="store_true", help="server on CPU 1, clients on 0")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.split and len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("--split needs 2 CPUs")
    extra = 'cpus = "1"' if args.split else ""
    plan = Plan(
        name="wander", setups=[("glibc", "glibc", extra)], repeats=1, design="sequential",
        step_s=args.seconds, max_warmup=15,
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="mb-canary-") as tmp:
        canary = build_canary(Path(tmp))
        logs = {kind: Path(tmp) / f"{kind}.txt" for kind in ("cpu", "mem")}
        canaries = [
            subprocess.Popen([str(canary), kind], stdout=logs[kind].open("w")) for kind in logs
        ]
        if args.split:
            clients_on(0, Path(tmp))
        try:
            result, _ = run(plan, args.out)
        finally:
            for proc in canaries:
                proc.terminate()
                proc.wait()
        probes = {kind: read_canary(path) for kind, path in logs.items()}
    (cell,) = result.cells
    samples = [(s.t, s.qps) for s in cell.samples if s.qps]
    times = np.array([t for t, _ in samples])
    qps = [q for _, q in samples]
    log_qps = np.log(qps)
    emit(
        {"split": args.split, "seconds": len(log_qps),
         "qps_median": float(np.exp(np.median(log_qps))),
         "second_cv_pct": noise.second_cv_pct(qps),
         "curve": aggregation_curve(qps)}
    )  # fmt: skip
    for kind, (at, per_step) in probes.items():
        # Each second's mean of the canary's samples taken within it (sysbench's seconds
        # end at their timestamps).
        within = [(at > t - 1) & (at <= t) for t in times]
        per_second = np.array([per_step[w].mean() if w.any() else math.nan for w in within])
        keep = ~np.isnan(per_second)
        probe = np.log(per_second[keep])
        emit(
            {"canary": kind, "seconds": int(keep.sum()), "cv_pct": 100 * float(np.std(probe)),
             **explained(log_qps[keep], probe)}
        )  # fmt: skip


if __name__ == "__main__":
    main()
