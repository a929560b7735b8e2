"""From a recording to a confirmed decision: does the confirmation on servers meet advise?

Issue 45's bench, on two workloads (--workloads, both by default), one closing JSON line
each:

- innodb: a MariaDB server started by hand (as a DBA would: its own datadir and socket,
  root by socket, the recording shim in LD_PRELOAD) under sysbench oltp_read_write;
- myrocks: a MyRocks server, IO-bound (its block cache, --rocks-cache, smaller than the
  data: the line gives both), under --rocks-threads clients of random-points, as the
  fidelity bench (bench_replay_fidelity.py) sets it up: a private server from the golden
  datadir with the shim in front of glibc, asked about its load through its client.cnf
  (`record --defaults-file`, its root has a password).

Each is recorded with `record --pid` (which keeps the server's description of its load
beside the trace), then `advise` on the trace, then the confirmation advise derived from
that description (`advise-out/confirm.toml`) run on private servers. The line gives the
predicted ratios (the replay's steady heap peak, and the server's RSS from advise's
saving), the confirmed peak RSS ratio of the chosen setting to the default with its 95%
interval (per-session peaks, blocks paired), and whether the confirmed interval meets
the server-RSS prediction within 25%.

    .venv/bin/python bench/bench_advise_confirm.py [--workloads innodb,myrocks] \
        [--rows 20000] [--seconds 30] [--budget 3m] [--confirm-time 8m]
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mallocbench.analysis import stats
from mallocbench.model.results import RunResult
from mallocbench.native import shim_path

WITHIN = 0.25


def _binary(name: str) -> str:
    found = shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.exists()), None
    )
    if found is None:
        raise SystemExit(f"{name} is not installed: run `make setup`")
    return found


def _cli(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mallocbench.cli", *args],
        capture_output=True, text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _sysbench(sock: Path, args: argparse.Namespace, *extra: str) -> list[str]:
    return [_binary("sysbench"), "oltp_read_write", f"--mysql-socket={sock}",
            "--mysql-user=root", "--mysql-db=sbtest", f"--tables={args.tables}",
            f"--table-size={args.rows}", *extra]  # fmt: skip


def record(args: argparse.Namespace, tmp: Path) -> tuple[Path, dict[str, Any]]:
    """The hand-started server under load, recorded; the trace and what record said."""
    datadir, sock, user = tmp / "data", tmp / "mysqld.sock", getpass.getuser()
    subprocess.run(
        [_binary("mariadb-install-db"), "--no-defaults", f"--datadir={datadir}",
         f"--user={user}", "--skip-test-db", "--auth-root-authentication-method=normal"],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("MBRECORD_")}
    env["LD_PRELOAD"] = str(shim_path())
    server = subprocess.Popen(
        [_binary("mariadbd"), "--no-defaults", f"--datadir={datadir}", f"--socket={sock}",
         "--skip-networking", f"--user={user}", f"--innodb-buffer-pool-size={args.cache}",
         f"--log-error={tmp / 'error.log'}"],
        env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        client = [_binary("mariadb"), f"--socket={sock}", "-uroot"]
        subprocess.run([*client, "-e", "CREATE DATABASE sbtest"], check=True, timeout=60)
        subprocess.run(_sysbench(sock, args, "prepare"), check=True, capture_output=True)
        load = subprocess.Popen(
            _sysbench(sock, args, f"--threads={args.threads}", f"--time={args.seconds + 10}",
                      "run"),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(5)
        trace = tmp / "prod.mbt"
        proc = _cli("record", "--pid", str(server.pid), "--seconds", str(args.seconds),
                    "--out", str(trace))  # fmt: skip
        load.wait()
        if proc.returncode != 0:
            raise SystemExit(f"record failed:\n{proc.stderr}")
        return trace, {"record_stderr": proc.stderr.strip().splitlines()}
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)


def record_myrocks(args: argparse.Namespace, tmp: Path) -> tuple[Path, dict[str, Any]]:
    """A private MyRocks server, IO-bound, under load, recorded; the trace and what record
    said, with the data's size beside the block cache's."""
    from common import server_under_load

    from mallocbench.replay import workload
    from mallocbench.run.experiment import Dataset
    from mallocbench.units import parse_size

    tmp.chmod(0o755)  # the private server's user reaches its state directory through it
    dataset = Dataset(
        tables=args.rocks_tables, rows=args.rocks_rows,
        cache_bytes=parse_size(args.rocks_cache, "--rocks-cache"),
    )  # fmt: skip
    extra = {"record_shim": str(shim_path())}
    trace = tmp / "prod.mbt"
    with server_under_load(
        tmp, "myrocks", dataset, extra, "glibc", args.rocks_step, args.rocks_threads, 5,
        args.seconds + 15,
    ) as server:  # fmt: skip
        proc = _cli("record", "--pid", str(server.pid), "--seconds", str(args.seconds),
                    "--defaults-file", str(server.client_cnf), "--out", str(trace))  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"record failed:\n{proc.stderr}")
    load = workload.load(trace)
    tables = load.tables if load is not None else []
    return trace, {
        "record_stderr": proc.stderr.strip().splitlines(),
        "data_bytes": sum(int(t.get("data_bytes", 0)) + int(t.get("index_bytes", 0))
                          for t in tables),
        "block_cache_bytes": dataset.cache_bytes,
    }  # fmt: skip


def confirmed_ratio(result: RunResult, base: str, chosen: str) -> list[float]:
    """The chosen setting's peak RSS over the default's, the mean over sessions with its
    95% interval, blocks paired."""
    peaks: dict[tuple[str, int], int] = {}
    for cell in result.cells:
        if cell.peak_rss_bytes:
            key = (cell.setup, cell.repeat)
            peaks[key] = max(peaks.get(key, 0), cell.peak_rss_bytes)
    repeats = sorted({r for (_, r) in peaks})
    a = [peaks[(chosen, r)] for r in repeats if (chosen, r) in peaks and (base, r) in peaks]
    b = [peaks[(base, r)] for r in repeats if (chosen, r) in peaks and (base, r) in peaks]
    return list(stats.ratio_ci(a, b))


def decide_and_confirm(args: argparse.Namespace, tmp: Path, trace: Path) -> dict[str, Any]:
    """advise on `trace`, then its confirmation on servers: the closing line's values."""
    out: dict[str, Any] = {}
    advice = tmp / "advise-out"
    started = time.monotonic()
    proc = _cli("advise", str(trace), "--budget", args.budget, "--allocators",
                args.allocators, "--confirm-time", args.confirm_time, "--out", str(advice),
                "--json")  # fmt: skip
    out["advise_s"] = round(time.monotonic() - started)
    if proc.returncode != 0:
        raise SystemExit(f"advise failed:\n{proc.stderr}")
    doc = json.loads(proc.stdout)
    d = doc["decision"]
    out["decision"] = d["line"]
    out["notes"] = [ln for ln in proc.stderr.splitlines() if ln.startswith("note: ")]
    toml = advice / "confirm.toml"
    if not toml.exists():
        out["confirmed"] = "nothing to confirm: the default kept, no setting left open"
        return out
    workload = (doc.get("confirmation") or {}).get("workload") or {}
    out["confirmation_steps"] = workload.get("steps")
    chosen = d["setting"] if d["answer"] == "deploy" else d["subject"]
    rss = d["rss_ratio"] if d["answer"] == "deploy" else d["subject_rss_ratio"]
    saves = d.get("saves_mib") if d["answer"] == "deploy" else d.get("subject_saves_mib")
    out["predicted_heap_ratio"] = rss
    if saves and d.get("server_rss_mib"):
        of = d["server_rss_mib"]
        out["predicted_server_rss_ratio"] = [
            1 - saves["point"] / of, 1 - saves["high"] / of, 1 - saves["low"] / of
        ]  # fmt: skip
    started = time.monotonic()
    run = _cli("run", str(toml), "--out", str(tmp / "confirm"), "--quiet")
    out["confirm_s"] = round(time.monotonic() - started)
    if run.returncode != 0:
        raise SystemExit(f"the confirmation failed:\n{run.stderr[-3000:]}")
    result = RunResult.from_dict(json.loads((tmp / "confirm" / "results.json").read_text()))
    ratio = confirmed_ratio(result, d["base"], chosen)
    out["confirmed_server_rss_ratio"] = ratio
    predicted = out.get("predicted_server_rss_ratio", [rss["point"]])[0]
    low, high = predicted * (1 - WITHIN), predicted * (1 + WITHIN)
    out["within_25pct"] = bool(ratio[1] <= high and ratio[2] >= low)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default="innodb,myrocks")
    parser.add_argument("--tables", type=int, default=2)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--cache", default="128M")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--rocks-tables", type=int, default=4)
    parser.add_argument("--rocks-rows", type=int, default=50_000)
    parser.add_argument("--rocks-cache", default="8M", help="block cache, smaller than the data")
    parser.add_argument("--rocks-threads", type=int, default=16)
    parser.add_argument("--rocks-step", default="random-points range=100")
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--budget", default="3m")
    parser.add_argument("--confirm-time", default="8m")
    parser.add_argument("--allocators", default="glibc,jemalloc")
    parser.add_argument("--keep", type=Path, help="keep each workload's trace and outputs here")
    args = parser.parse_args()
    for name in args.workloads.split(","):
        if name == "innodb":
            out: dict[str, Any] = {"workload": "innodb oltp_read_write", "tables": args.tables,
                                   "rows": args.rows, "threads": args.threads}  # fmt: skip
        elif name == "myrocks":
            out = {"workload": f"myrocks IO-bound {args.rocks_step}",
                   "tables": args.rocks_tables, "rows": args.rocks_rows,
                   "threads": args.rocks_threads}  # fmt: skip
        else:
            raise SystemExit(f"--workloads: {name!r} is neither innodb nor myrocks")
        with tempfile.TemporaryDirectory(prefix="mb-advise-confirm-") as tmpname:
            tmp = args.keep / name if args.keep else Path(tmpname)
            tmp.mkdir(parents=True, exist_ok=True)
            trace, said = (record_myrocks if name == "myrocks" else record)(args, tmp)
            out.update(said)
            out.update(decide_and_confirm(args, tmp, trace))
        out["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
