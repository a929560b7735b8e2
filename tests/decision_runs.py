"""Stored runs for the decision rule, built from exact ratios so their intervals are known.

Each run is a complete block design: every setup's value in a block is the base's times
its true ratio times a residual from a fixed pattern whose rows and columns sum to zero,
so the pooled residual (and with it every interval's width) is set by one spread per
measure. `python tests/decision_runs.py` writes them under tests/fixtures/.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from mallocbench.model.metadata import RunMetadata
from mallocbench.model.results import Cell, RunResult, SessionInfo, SetupInfo

MIB = 1 << 20
START = 1795000000.0  # the first block's servers start (epoch seconds)
FIXTURES = Path(__file__).parent / "fixtures"
TRADE_OFF_FILE = FIXTURES / "results-tradeoff.json"
DEMO_FILE = FIXTURES / "results-demo-myrocks.json"

# Residual patterns (setups x blocks), every row and column summing to zero.
FOUR_BY_FOUR = ((1, -1, 1, -1), (-1, 1, -1, 1), (1, 1, -1, -1), (-1, -1, 1, 1))
FOUR_BY_THREE = ((1, -1, 0), (-1, 1, 0), (1, 0, -1), (-1, 0, 1))


LIB = "/usr/lib/x86_64-linux-gnu"
SETUPS = {
    "glibc": SetupInfo("glibc", "glibc"),
    "glibc-mmap0": SetupInfo("glibc-mmap0", "glibc", knobs={"MALLOC_MMAP_MAX_": "0"}),
    "jemalloc": SetupInfo("jemalloc", "jemalloc", allocator_library=f"{LIB}/libjemalloc.so.2"),
    "tcmalloc": SetupInfo("tcmalloc", "tcmalloc", allocator_library=f"{LIB}/libtcmalloc.so.4"),
    "mimalloc": SetupInfo("mimalloc", "mimalloc", allocator_library=f"{LIB}/libmimalloc.so.2"),
}


def _block_run(
    run_id: str,
    engine: str,
    step: str,
    threads: int,
    setups: list[SetupInfo],
    truths: dict[str, tuple[float, float, float]],  # setup -> (qps, p99, rss) ratios
    base_levels: tuple[float, float, float],  # the base's qps, p99 ms, peak RSS bytes
    spreads: tuple[float, float, float],  # residual scale per measure (log)
    pattern: tuple[tuple[int, ...], ...],
    min_effect: float,
) -> RunResult:
    cells, sessions = [], []
    blocks = len(pattern[0])
    for block in range(blocks):
        drift = 1 + 0.04 * (block % 2) - 0.02 * (block // 2)  # shared: pairing removes it
        for row, setup in enumerate(setups):
            qf, pf, rf = truths[setup.name]
            e = pattern[row][block]
            qps = base_levels[0] * qf * drift * math.exp(spreads[0] * e)
            p99 = base_levels[1] * pf / drift * math.exp(spreads[1] * e)
            peak = int(base_levels[2] * rf * math.exp(spreads[2] * e))
            session = f"{setup.name}.{engine}.r{block}"
            cells.append(
                Cell(
                    setup.name,
                    engine,
                    step,
                    threads,
                    block,
                    "range-agg",
                    qps=qps,
                    p99_ms=p99,
                    session=session,
                )
            )
            # Every setup's server up at once for the block (interleaved): 150 s each.
            start = START + 160.0 * block
            sessions.append(
                SessionInfo(session, setup.name, engine, block, start, start + 150.0, peak)
            )
    return RunResult(
        run_id,
        run_id.split("-")[0],
        setups[0].name,
        metadata=RunMetadata(min_effect=min_effect, repeats=blocks, experiment_file="sort32m.toml"),
        setups=setups,
        sessions=sessions,
        cells=cells,
    )


def trade_off_run() -> RunResult:
    """Issue 53's run: 32 MB sort buffers, read-only-order range=10000 at 8 clients,
    InnoDB, 4 blocks: tcmalloc 1.29x throughput [1.25, 1.33], p99 0.92x, peak RSS 1.09x
    [1.08, 1.10]; glibc with MALLOC_MMAP_MAX_=0 1.04x [1.01, 1.07] at 1.03x peak RSS;
    jemalloc 1.00 [0.97, 1.03] at 1.01x. A minimum effect of 5%: the glibc knob's gain
    and memory are within it, tcmalloc's are not."""
    setups = [SETUPS[n] for n in ("glibc", "tcmalloc", "glibc-mmap0", "jemalloc")]
    truths = {
        "glibc": (1.0, 1.0, 1.0),
        "tcmalloc": (1.29, 0.92, 1.088),
        "glibc-mmap0": (1.04, 0.99, 1.03),
        "jemalloc": (1.0, 1.0, 1.013),
    }
    return _block_run(
        "sort32m-1",
        "innodb",
        "read-only-order range=10000",
        8,
        setups,
        truths,
        (820.0, 14.0, 215 * MIB),
        (0.0145, 0.0145, 0.0043),
        FOUR_BY_FOUR,
        0.05,
    )


def demo_run() -> RunResult:
    """The demo's MyRocks shape (examples/quick.toml, 3 blocks): jemalloc and tcmalloc at
    0.77x and 0.78x the peak RSS, throughput unclear."""
    setups = [SETUPS[n] for n in ("glibc", "jemalloc", "tcmalloc", "mimalloc")]
    truths = {
        "glibc": (1.0, 1.0, 1.0),
        "jemalloc": (1.02, 1.0, 0.77),
        "tcmalloc": (0.99, 1.0, 0.78),
        "mimalloc": (1.0, 1.0, 0.97),
    }
    run = _block_run(
        "quick-1",
        "myrocks",
        "random-points range=100",
        16,
        setups,
        truths,
        (4200.0, 9.0, 160 * MIB),
        (0.05, 0.05, 0.02),
        FOUR_BY_THREE,
        0.03,
    )
    run.metadata.experiment_file = "examples/quick.toml"
    return run


def write() -> None:
    for path, run in ((TRADE_OFF_FILE, trade_off_run()), (DEMO_FILE, demo_run())):
        path.write_text(json.dumps(run.to_dict(), indent=1) + "\n")


if __name__ == "__main__":
    write()
