"""Replay fidelity: does a replay of a recorded server rank allocators as the live servers do?

Issue 28's Done-when, on MyRocks with data about 6x its block cache (8 x 250,000 rows,
64 MiB block cache), 16 clients, random-points (100 ids a query). Three phases, each one
JSON line, so they can run one at a time on a busy host:

- `record`: the trace: a private server under glibc with the shim, recorded for
  --seconds after 5 s of load, written to a temporary name and renamed when complete.
- `live`: the live servers. Each setting (glibc, jemalloc, tcmalloc, glibc with
  MALLOC_ARENA_MAX 1, 2, 4) runs the same workload with the shim in front of its
  allocator, recorded for --seconds, so its live requested bytes are known exactly (the
  trace's ideal curve, which starts from the blocks live when the window opened). Its
  heap RSS (the account's heap mappings: main heap, glibc arenas, other anonymous
  memory) is sampled every second; the shim's own mappings (its live-block table and
  buffers, reported in the trace's end frame) are subtracted. Live heap ratio = peak
  heap RSS / peak live bytes: the same quantity a replay reports as RSS/live. What the
  server maps anonymously outside malloc (stacks are apart; InnoDB's pool is apart) stays
  in every setting's numerator alike.
- `replay`: replays of the `record` trace under each setting, --repeats each,
  interleaved, in the order given by --order (recorded by default), with the recorded
  timing: peak-RSS CV, RSS/live, replay time over recording time.

`compare` reads the phases' JSON lines and prints the ranking check: the replay's and
the live servers' orders, each pair's ratio with its interval (a pair the replay cannot
tell apart is "not shown", not ranked), and the glibc/jemalloc ratio of each (target:
within 25%). The arena sweep's replays may run at --speed 2 (glibc releases nothing on a
timer, so its RSS does not depend on the pace): its group is judged on its own file,
glibc's default included, never pooled with replays at another speed.

    .venv/bin/python bench/bench_replay_fidelity.py record --out /work/traces/x.mbt
    .venv/bin/python bench/bench_replay_fidelity.py live --seconds 120 > live.json
    .venv/bin/python bench/bench_replay_fidelity.py replay --trace T --repeats 5 > rep.json
    .venv/bin/python bench/bench_replay_fidelity.py replay --trace T --repeats 2 --speed 2 \
        --settings "glibc,glibc arenas=1,glibc arenas=2,glibc arenas=4" > arenas.json
    .venv/bin/python bench/bench_replay_fidelity.py compare live.json rep.json arenas.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from common import server_under_load

from mallocbench.analysis import stats
from mallocbench.memory import process
from mallocbench.model.results import json_safe
from mallocbench.native import shim_path
from mallocbench.patterns.experiment import make_setup
from mallocbench.replay import control, runner
from mallocbench.replay import trace as tracemod
from mallocbench.run.experiment import Dataset
from mallocbench.servers.mariadb import PrivateServer
from mallocbench.units import parse_size

# name: (allocator, knobs); the arena sweep is glibc's default beside 1, 2 and 4 arenas
SETTINGS: dict[str, tuple[str, dict[str, str]]] = {
    "glibc": ("glibc", {}),
    "jemalloc": ("jemalloc", {}),
    "tcmalloc": ("tcmalloc", {}),
    "glibc arenas=1": ("glibc", {"MALLOC_ARENA_MAX": "1"}),
    "glibc arenas=2": ("glibc", {"MALLOC_ARENA_MAX": "2"}),
    "glibc arenas=4": ("glibc", {"MALLOC_ARENA_MAX": "4"}),
}
ALLOCATOR_ORDER = ("glibc", "jemalloc", "tcmalloc")
ARENA_ORDER = ("glibc arenas=1", "glibc arenas=2", "glibc arenas=4", "glibc")
HEAP_KINDS = ("main_heap", "glibc_heap", "anon")


def load_1min() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


class HeapSampler:
    """The server's heap RSS every second while its window is open; keeps the peak."""

    def __init__(self, pid: int, allocator: str) -> None:
        self.pid, self.allocator = pid, allocator
        self.peak = 0
        self.samples: list[int] = []
        self.loads: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            kinds = process.sample(self.pid, self.allocator).by_kind()
            heap = sum(kinds[k]["rss"] for k in HEAP_KINDS)
            self.samples.append(heap)
            self.peak = max(self.peak, heap)
            self.loads.append(load_1min())


def serve(
    args: argparse.Namespace, allocator: str, knobs: dict[str, str], tmp: Path, body: Any
) -> Any:
    """A private MyRocks server with the shim in front of `allocator`, under load."""
    dataset = Dataset(
        tables=args.tables, rows=args.rows, cache_bytes=parse_size(args.cache, "--cache")
    )
    extra = {"knobs": knobs, "record_shim": str(shim_path())}
    with server_under_load(
        tmp, args.engine, dataset, extra, allocator, args.step, args.threads, 5,
        args.seconds + 15,
    ) as server:  # fmt: skip
        return body(server)


def phase_record(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    final: Path = args.out
    partial = final.with_name(f".{final.name}.partial")
    loads: list[float] = []

    def body(server: PrivateServer) -> str:
        loads.append(load_1min())
        status = control.record(server.pid, args.seconds, partial).closing
        loads.append(load_1min())
        return status

    status = serve(args, "glibc", {}, tmp, body)
    info = tracemod.check(partial)
    partial.rename(final)
    data = info.data
    recorded_s = float(data["duration_s"])
    return {
        "phase": "record",
        "trace": str(final),
        "status": status,
        "recorded_s": round(recorded_s, 1),
        "events": data["events"],
        "calls": data["calls"],
        "threads": data["threads"],
        "bytes": data["bytes"],
        "mb_per_minute": round(data["bytes"] / 1e6 / recorded_s * 60, 1),
        "ideal_peak_live": data["ideal_peak_live"],
        "load_1min": loads,
    }


def live_one(args: argparse.Namespace, name: str, tmp: Path) -> dict[str, Any]:
    allocator, knobs = SETTINGS[name]
    out = tmp / f"{name.replace(' ', '-')}.mbt"

    def body(server: PrivateServer) -> HeapSampler:
        sampler = HeapSampler(server.pid, allocator)
        control.record(server.pid, args.seconds, out, started=sampler.start)
        sampler.stop()
        return sampler

    sampler = serve(args, allocator, knobs, tmp / name.replace(" ", "-"), body)
    data = tracemod.check(out).data
    own = int(data.get("end", {}).get("shim_mapped_peak", 0) or 0)
    live = int(data["ideal_peak_live"])
    out.unlink()
    return {
        "peak_heap_rss": sampler.peak,
        "shim_mapped_peak": own,
        "ideal_peak_live": live,
        "heap_ratio": round((sampler.peak - own) / live, 4) if live else None,
        "events": data["events"],
        "load_1min": [min(sampler.loads, default=0), max(sampler.loads, default=0)],
    }


def phase_live(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    summary: dict[str, Any] = {"phase": "live", "seconds": args.seconds, "settings": {}}
    for repeat in range(args.repeats):
        for name in args.settings.split(","):
            one = live_one(args, name, tmp)
            summary["settings"].setdefault(name, []).append(one)
            print(json.dumps({"repeat": repeat, "setting": name, **one}), file=sys.stderr)
    return summary


def phase_replay(args: argparse.Namespace) -> dict[str, Any]:
    info = tracemod.check(args.trace)
    recorded_s = float(info.data["duration_s"])
    setups = {}
    for name in args.settings.split(","):
        allocator, knobs = SETTINGS[name]
        setups[name] = make_setup("bench", name.replace(" ", "-"), allocator, dict(knobs))
    runs: dict[str, list[Any]] = {name: [] for name in setups}
    for repeat in range(args.repeats):  # interleaved, as `replay` does
        for name, setup in setups.items():
            before = load_1min()
            run = runner.run_once(
                setup, args.trace, "recorded", args.speed, repeat, args.timeout, args.order
            )
            runs[name].append((run, before, load_1min()))
            print(json.dumps({"repeat": repeat, "setting": name, "status": run.status,
                              "wall_s": run.data.get("wall_s"),
                              "rss_over_live": run.data.get("rss_over_live"),
                              "load_1min": [before, load_1min()]}), file=sys.stderr)  # fmt: skip
    out: dict[str, Any] = {
        "phase": "replay",
        "trace": str(args.trace),
        "recorded_s": round(recorded_s, 1),
        "events": info.data["events"],
        "order": args.order,
        "speed": args.speed,
        "settings": {},
    }
    for name, series in runs.items():
        ok = [r for r, _, _ in series if r.status == "ok"]
        peaks = [float(r.data["peak_heap_rss"]) for r in ok]
        walls = [float(r.data["wall_s"]) for r in ok]
        out["settings"][name] = {
            "ok": len(ok),
            "statuses": [r.status for r, _, _ in series],
            "peak_heap_rss": peaks,
            "rss_over_live": [float(r.data["rss_over_live"]) for r in ok],
            "peak_rss_cv": round(statistics.stdev(peaks) / statistics.fmean(peaks), 4)
            if len(peaks) > 1
            else None,
            "replay_over_recording": [round(w / recorded_s * args.speed, 3) for w in walls],
            "load_1min": [x for _, a, b in series for x in (a, b)],
        }
    return out


def _ratios(phase: dict[str, Any], key: str) -> dict[str, list[float]]:
    out = {}
    for name, value in phase["settings"].items():
        if isinstance(value, list):  # live: one record per repeat
            out[name] = [float(v[key]) for v in value if v.get(key)]
        else:
            out[name] = [float(v) for v in value.get(key, [])]
    return out


def ranking(values: dict[str, list[float]], names: tuple[str, ...]) -> list[str]:
    have = [n for n in names if values.get(n)]
    return sorted(have, key=lambda n: statistics.fmean(values[n]))


def _ci(a: list[float], b: list[float]) -> list[float]:
    return [round(x, 3) for x in stats.ratio_ci(a, b)]


def pairs(
    live: dict[str, list[float]], replay: dict[str, list[float]], names: tuple[str, ...]
) -> list[dict[str, Any]]:
    """Each pair's ratio (a/b) live and replayed, with 95% intervals where the repeats
    give one. A replay agrees when its supported direction is live's; an interval that
    holds 1 is "not shown", never a rank."""
    have = [n for n in names if live.get(n) and replay.get(n)]
    out = []
    for i, a in enumerate(have):
        for b in have[i + 1 :]:
            lr, rr = _ci(live[a], live[b]), _ci(replay[a], replay[b])
            shown = not math.isnan(rr[1]) and stats.significant(rr[1], rr[2])
            agree = shown and (rr[0] > 1) == (lr[0] > 1)
            out.append(
                {
                    "pair": f"{a} / {b}",
                    "live": lr,
                    "replay": rr,
                    "replay_direction": ("higher" if rr[0] > 1 else "lower")
                    if shown
                    else "not shown",
                    "agrees_with_live": agree,
                }
            )
    return out


def _summary(per_setting: dict[str, list[float]]) -> dict[str, list[float]]:
    out = {}
    for name, xs in per_setting.items():
        if xs:
            mean, low, high = stats.mean_ci(xs)
            out[name] = [round(mean, 3), round(low, 3), round(high, 3), len(xs)]
    return out


def phase_compare(args: argparse.Namespace) -> dict[str, Any]:
    """Each group (allocators, arenas) is judged on the one replay file that holds most
    of it, so replays at different speeds are never pooled."""
    docs = [json.loads(Path(p).read_text().strip().splitlines()[-1]) for p in args.files]
    live = next(d for d in docs if d["phase"] == "live")
    replays = [d for d in docs if d["phase"] == "replay"]
    live_r = _ratios(live, "heap_ratio")
    out: dict[str, Any] = {"phase": "compare", "live": _summary(live_r)}
    for title, names in (("allocators", ALLOCATOR_ORDER), ("arenas", ARENA_ORDER)):
        doc = max(replays, key=lambda d: sum(1 for n in names if n in d["settings"]))
        replay_r = {n: v for n, v in _ratios(doc, "rss_over_live").items() if n in names}
        out[f"{title}_replay"] = {"speed": doc.get("speed"), **_summary(replay_r)}
        a, b = ranking(live_r, names), ranking(replay_r, names)
        out[f"{title}_ranked_live"] = a
        out[f"{title}_ranked_replay"] = b
        out[f"{title}_same_ranking"] = a == b
        out[f"{title}_pairs"] = pairs(live_r, replay_r, names)
        if title == "allocators" and all(live_r.get(n) and replay_r.get(n) for n in names[:2]):
            lg = statistics.fmean(live_r["glibc"]) / statistics.fmean(live_r["jemalloc"])
            rg = statistics.fmean(replay_r["glibc"]) / statistics.fmean(replay_r["jemalloc"])
            out["glibc_over_jemalloc"] = {
                "live": _ci(live_r["glibc"], live_r["jemalloc"]),
                "replay": _ci(replay_r["glibc"], replay_r["jemalloc"]),
                "replay_over_live": round(rg / lg, 3),
                "within_25pct": abs(rg / lg - 1) <= 0.25,
            }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="phase", required=True)
    for name in ("record", "live"):
        p = sub.add_parser(name)
        p.add_argument("--seconds", type=float, default=120)
        p.add_argument("--threads", type=int, default=16)
        p.add_argument("--step", default="random-points range=100")
        p.add_argument("--engine", default="myrocks")
        p.add_argument("--tables", type=int, default=8)
        p.add_argument("--rows", type=int, default=250000)
        p.add_argument("--cache", default="64M", help="block cache: data is about 6x it")
    sub.choices["record"].add_argument("--out", type=Path, required=True)
    sub.choices["live"].add_argument("--settings", default=",".join(SETTINGS))
    sub.choices["live"].add_argument("--repeats", type=int, default=1)
    p = sub.add_parser("replay")
    p.add_argument("--trace", type=Path, required=True)
    p.add_argument("--settings", default=",".join(ALLOCATOR_ORDER))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--order", choices=runner.ORDERS, default="recorded")
    p.add_argument("--timeout", type=float, default=1800)
    p = sub.add_parser("compare")
    p.add_argument("files", nargs="+")
    args = parser.parse_args()
    if args.phase == "replay":
        summary = phase_replay(args)
    elif args.phase == "compare":
        summary = phase_compare(args)
    else:
        with tempfile.TemporaryDirectory(prefix="mb-bench-fidelity-") as name:
            tmp = Path(name)
            tmp.chmod(0o755)
            summary = phase_record(args, tmp) if args.phase == "record" else phase_live(args, tmp)
    summary["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    print(json.dumps(json_safe(summary)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
