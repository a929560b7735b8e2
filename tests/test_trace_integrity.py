"""A trace's integrity at replay, on traces written frame by frame here: one whose count
disagrees with its header replays with a warning naming what is there; absurd thread
counts and gaps no replay could wait out are refused in one line, with the bound."""

from __future__ import annotations

import ctypes
import json
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from mallocbench.errors import MallocbenchError
from mallocbench.native import replayer_path
from mallocbench.replay import runner
from mallocbench.replay import trace as tracemod

HEADER, STATUS_AT, INFO_AT = 1024, 16, 256  # native/mbtrace.h
FRAME_MAGIC, EVENTS, END = 0x5246424D, 1, 3
MALLOC, FREE = 1, 5
REC = struct.Struct("<QQQQ")
ZSTD = ctypes.CDLL("libzstd.so.1")
ZSTD.ZSTD_compressBound.restype = ctypes.c_size_t
ZSTD.ZSTD_compressBound.argtypes = [ctypes.c_size_t]
ZSTD.ZSTD_compress.restype = ctypes.c_size_t
ZSTD.ZSTD_compress.argtypes = [
    ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int
]  # fmt: skip


def frame(kind: int, raw: bytes) -> bytes:
    out = ctypes.create_string_buffer(ZSTD.ZSTD_compressBound(len(raw)))
    n = ZSTD.ZSTD_compress(out, len(out), raw, len(raw), 1)
    return struct.pack("<IIII", FRAME_MAGIC, kind, n, len(raw)) + out.raw[:n]


def calls(thread: int, *recs: tuple[int, int, int, int]) -> bytes:
    """One thread's block of an EVENTS frame: (time ns, kind, pointer, size) each."""
    body = b"".join(REC.pack(t << 8 | kind, ptr, size, 0) for t, kind, ptr, size in recs)
    return struct.pack("<II", thread, len(recs)) + body


def write_trace(
    path: Path,
    status: str,
    blocks: list[bytes],
    end_events: int | None,
    later: Sequence[list[bytes]] = (),
) -> Path:
    """`blocks` in one EVENTS frame, then each of `later` in a frame of its own."""
    head = bytearray(HEADER)
    head[:16] = b"MBTRACE\0" + struct.pack("<II", 1, HEADER)
    head[STATUS_AT : STATUS_AT + len(status)] = status.encode()
    info = b"host=test\npid=1\nexe=/bin/test\nlive_table=kept\n"
    head[INFO_AT : INFO_AT + len(info)] = info
    data = bytes(head) + b"".join(frame(EVENTS, b"".join(f)) for f in [blocks, *later])
    if end_events is not None:
        data += frame(END, f"events={end_events}\ndropped=0\n".encode())
    path.write_bytes(data)
    return path


def mallocbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mallocbench.cli", *args],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip


def refused(result: subprocess.CompletedProcess[str], figures: Any) -> str:
    figures.add("faults injected")
    figures.check_output(result.stderr)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("mallocbench: error: "), lines[0]
    return lines[0]


def pairs(thread: int, n: int, base: int = 0x10000) -> bytes:
    """`n` blocks made and freed by one thread, a microsecond apart."""
    recs = []
    for i in range(n):
        recs += [
            (2 * i * 1000, MALLOC, base + 64 * i, 48),
            ((2 * i + 1) * 1000, FREE, base + 64 * i, 0),
        ]
    return calls(thread, *recs)


def test_a_count_below_the_header_s_replays_with_a_warning_in_the_metadata(
    tmp_path: Path, integrity_figures: Any
) -> None:
    """END frame and header say 300 calls, the frames hold 200: replayed, with one warning
    naming both numbers, kept in the replay's stored metadata."""
    trace = write_trace(
        tmp_path / "short.mbt", "complete (disarmed) events=300 dropped=0", [pairs(7, 100)], 300
    )
    info = tracemod.check(trace)
    assert (info.data["calls_present"], info.data["header_events"]) == (200, 300)
    assert info.data["end_frame"] is True
    out = tmp_path / "replayed"
    result = mallocbench("replay", str(trace), "--allocators", "glibc", "--repeats", "1",
                         "--timing", "none", "--out", str(out))  # fmt: skip
    integrity_figures.add("faults injected")
    integrity_figures.check_output(result.stderr)
    assert result.returncode == 0, result.stderr
    said = "the trace holds 200 calls of the 300 its header counts"
    assert said in result.stdout, result.stdout
    stored = json.loads(mallocbench("report", str(out), "--format", "json").stdout)
    replay = stored["metadata"]["replay"]
    assert any(said in w for w in replay["warnings"]), replay["warnings"]
    assert (replay["trace"]["calls_present"], replay["trace"]["header_events"]) == (200, 300)
    # the same without its END frame: the header's count is the status's
    unclosed = write_trace(
        tmp_path / "unclosed.mbt", "complete (disarmed) events=300 dropped=0", [pairs(7, 100)], None
    )
    assert tracemod.check(unclosed).cut_short() == (
        "the trace has no END frame (it was cut short): it holds 200 calls of the 300 its "
        "header counts; the replay covers those"
    )
    # the same trace whole: no such warning
    whole = write_trace(
        tmp_path / "whole.mbt", "complete (disarmed) events=200 dropped=0", [pairs(7, 100)], 200
    )
    assert tracemod.check(whole).cut_short() is None


def test_more_threads_than_any_server_is_refused_at_once(
    tmp_path: Path, integrity_figures: Any
) -> None:
    """100,000 threads took minutes to index (20,000: 25 s); the bound, 4096, is named."""
    many = [pairs(thread, 1) for thread in range(1, 100_001)]
    trace = write_trace(tmp_path / "many.mbt", "complete (disarmed) events=200000", many, 200_000)
    began = time.monotonic()
    line = refused(mallocbench("replay", str(trace)), integrity_figures)
    assert time.monotonic() - began < 60
    assert "more than 4096 threads" in line and "byte offset 1024" in line, line
    # at the bound itself, a trace is read
    at_bound = write_trace(tmp_path / "4096.mbt", "complete", many[:4096], 8192)
    assert tracemod.check(at_bound).data["threads"] == 4096


@pytest.mark.parametrize(
    ("gap_ns", "speed", "needle"),
    [
        (10**15, "1", "spans 1000000 s: at --speed 1 one replay would take 11.6 days"),
        (3000 * 10**9, "0.002", "give --speed 0.035 or more, or --timing none"),
    ],
)
def test_a_gap_no_replay_could_wait_out_is_refused_with_the_bound(
    tmp_path: Path, integrity_figures: Any, gap_ns: int, speed: str, needle: str
) -> None:
    """Once an OverflowError ("timeout is too large"); the bound is a day per replay."""
    blocks = [calls(3, (0, MALLOC, 0x10000, 100), (gap_ns, FREE, 0x10000, 0))]
    trace = write_trace(tmp_path / "gap.mbt", "complete (disarmed) events=2", blocks, 2)
    line = refused(mallocbench("replay", str(trace), "--speed", speed), integrity_figures)
    assert needle in line and "over the bound of 1 day" in line, line
    # the replayer on its own refuses it too, rather than sleeping for days
    alone = subprocess.run(
        [str(replayer_path()), str(trace), "--speed", speed],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert alone.returncode == 2 and "over the bound of 1 day" in alone.stderr, alone.stderr
    # tune measures by the same replays, and refuses it the same way
    from mallocbench.tune.evaluate import ReplayEvaluator

    with pytest.raises(MallocbenchError, match="over the bound of 1 day"):
        ReplayEvaluator(trace, "recorded", float(speed), gap_ns / 1e9)
    # without the gaps (--timing none) it replays, under a deadline Python can wait for
    flat = mallocbench("replay", str(trace), "--allocators", "glibc", "--repeats", "1",
                       "--timing", "none", "--json")  # fmt: skip
    assert flat.returncode == 0, flat.stderr
    assert runner.replay_timeout(gap_ns / 1e9, float(speed), "none") <= runner.MAX_TIMEOUT_S
