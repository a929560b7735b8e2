"""Which per-start candidates explain the per-start level of throughput in finished runs.

    .venv/bin/python bench/per_start_candidates.py OUT/results.json [OUT2/results.json ...]

Each session (one server start) gets its level: the log of its cells' mean QPS, less its
block's mean and its setup's mean (the two-way additive model the verdict uses), so what
is left is the per-start effect plus slice noise. Each candidate a session recorded
(`start` in results.json, probes/start.py) is regressed on it alone; the share of the
level's variance it explains (R squared) is printed per candidate, with the number of
starts; beside them, the other processes' CPU share measured in the session's slices.
A candidate caused by the allocator (AnonHugePages) is not a fair covariate for a
comparison of allocators: it is shown, marked.
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

CAUSED_BY_ALLOCATOR = {"anon_huge_bytes", "anon_huge_bytes_end"}


def levels(result: dict) -> dict[str, float]:
    """session id -> its per-start level (log QPS less block and setup means)."""
    qps: dict[str, list[float]] = defaultdict(list)
    for cell in result["cells"]:
        if cell.get("qps"):
            qps[cell["session"]].append(math.log(cell["qps"]))
    sessions = {s["id"]: s for s in result["sessions"] if s["id"] in qps}
    raw = {sid: float(np.mean(v)) for sid, v in qps.items() if sid in sessions}
    key = {sid: (sessions[sid]["engine"], sessions[sid]["setup"]) for sid in raw}
    block = {sid: (sessions[sid]["engine"], sessions[sid]["repeat"]) for sid in raw}
    grand = {e: np.mean([raw[s] for s in raw if key[s][0] == e]) for e, _ in key.values()}

    def mean_of(group: dict[str, tuple[str, object]], sid: str) -> float:
        return float(np.mean([raw[s] for s in raw if group[s] == group[sid]]))

    return {
        sid: raw[sid] - mean_of(block, sid) - mean_of(key, sid) + float(grand[key[sid][0]])
        for sid in raw
    }


def others_share(result: dict) -> dict[str, float]:
    """session id -> the mean share of the machine other processes used in its slices:
    not a start candidate but what the host did meanwhile, for comparison with them."""
    shares: dict[str, list[float]] = defaultdict(list)
    for cell in result["cells"]:
        for piece in cell.get("slices") or []:
            if "other_cpu_share" in piece:
                shares[cell["session"]].append(float(piece["other_cpu_share"]))
    return {sid: float(np.mean(v)) for sid, v in shares.items()}


def main(paths: list[str]) -> None:
    found: dict[str, list[tuple[float, float]]] = defaultdict(list)
    every: list[float] = []
    for path in paths:
        result = json.loads(Path(path).read_text())
        starts = {s["id"]: dict(s.get("start") or {}) for s in result["sessions"]}
        for sid, share in others_share(result).items():
            starts.setdefault(sid, {})["other_cpu_share_measured"] = share
        for sid, level in levels(result).items():
            every.append(level)
            for name, value in starts.get(sid, {}).items():
                if isinstance(value, int | float):
                    found[name].append((float(value), level))
    total = [lv for pairs in found.values() for _, lv in pairs]
    if not total:
        print("no session recorded its start candidates")
        return
    print(f"per-start level: {len(every)} starts, SD {100 * float(np.std(every)):.1f}% of QPS")
    print(f"{'candidate':28} {'starts':>6} {'R^2':>6}")
    for name, pairs in sorted(found.items()):
        x, y = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
        r2 = float(np.corrcoef(x, y)[0, 1] ** 2) if x.std() > 0 and y.std() > 0 else 0.0
        mark = "  (caused by the allocator too)" if name in CAUSED_BY_ALLOCATOR else ""
        print(f"{name:28} {len(pairs):6d} {r2:6.2f}{mark}")
    together(found)


def together(found: dict[str, list[tuple[float, float]]]) -> None:
    """The fair candidates (not caused by the allocator) in one regression: the share of
    the level's variance they explain together, and adjusted for their number."""
    fair = [n for n in sorted(found) if n not in CAUSED_BY_ALLOCATOR]
    rows = {len(found[n]) for n in fair}
    if not fair or len(rows) != 1:
        return  # not every start recorded every candidate: no common design matrix
    y = np.array([lv for _, lv in found[fair[0]]])
    x = np.column_stack([np.ones(len(y))] + [[v for v, _ in found[n]] for n in fair])
    fitted = x @ np.linalg.lstsq(x, y, rcond=None)[0]
    r2 = 1 - float(((y - fitted) ** 2).sum() / ((y - y.mean()) ** 2).sum())
    k = x.shape[1] - 1
    adjusted = 1 - (1 - r2) * (len(y) - 1) / max(len(y) - k - 1, 1)
    print(f"{'all fair candidates':28} {len(y):6d} {r2:6.2f}  (adjusted R^2 {adjusted:.2f})")


if __name__ == "__main__":
    main(sys.argv[1:])
