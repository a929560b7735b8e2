"""What a trace holds, as the replayer reads it (`mbreplay --check`): header, status, calls.

A truncated or corrupt trace, or one of a newer format, is refused in one line that names
the byte offset; a trace whose recording stopped early (a full disk, the disk budget, or
the shim's buffer cap when its writer fell behind) is still replayable and its status says
where it stopped.

A long recording is a segmented trace: a directory of segments 0001.mbt, 0002.mbt, ...
(native/mbrecord.c), each a trace of its own that starts with the blocks live at its
start. The directory is the whole recording (its first segment's header says where and
when it began, its last one's status how it ended); a segment is a part that replays
alone. Both are read by the replayer, which takes either.
"""

from __future__ import annotations

import json
import re
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mallocbench.errors import MallocbenchError
from mallocbench.native import replayer_path

EXIT_USAGE = 2


class TraceError(MallocbenchError):
    """A trace that cannot be read: missing, truncated, corrupt, of a newer format."""


def replayer_error(stderr: str) -> str:
    line = next((ln for ln in stderr.splitlines() if ln.strip()), "no message")
    return line.removeprefix("mbreplay: error: ")


@dataclass(frozen=True)
class TraceInfo:
    path: Path
    data: dict[str, Any]

    @property
    def status(self) -> str:
        return str(self.data.get("status", ""))

    @property
    def complete(self) -> bool:
        return self.status.startswith("complete")

    @property
    def header(self) -> dict[str, str]:
        return dict(self.data.get("info") or {})

    @property
    def segments(self) -> int:
        """The segments replayed joined (0: a trace file, or one segment alone)."""
        return int(self.data.get("segments") or 0)

    def cut_short(self) -> str | None:
        """How much of the recording a trace without its END frame, or with fewer calls
        than its header counts, still holds (None: it is whole, or read only in part)."""
        if "calls_present" not in self.data or self.data.get("until_s") is not None:
            return None
        present = int(self.data["calls_present"])
        counted = int(self.data.get("header_events", -1))
        of = f" of the {counted:,} its header counts" if counted >= 0 else ""
        if not self.data.get("end_frame", True):
            return (
                f"the trace has no END frame (it was cut short): it holds {present:,} calls"
                f"{of}; the replay covers those"
            )
        if counted >= 0 and counted != present:
            return f"the trace holds {present:,} calls{of}; the replay covers those"
        return None

    def warnings(self, server_version: str | None = None) -> list[str]:
        """What a reader of a replay must know about this trace, one sentence each."""
        out = []
        if self.status.startswith("stopped"):
            out.append(f"the recording {self.status}: the replay covers what came before")
        cut = self.cut_short()
        if cut is not None:
            out.append(cut)
        elif not self.complete and not self.status.startswith("stopped"):
            out.append(
                "the trace was not closed (the process ended without disarming): "
                "the replay covers what was written"
            )
        part = self.header.get("segment")
        if part and part != "1" and not self.segments:
            out.append(
                f"segment {part} of a recording, replayed alone: it starts from the blocks "
                "live at its start (the whole recording is its directory)"
            )
        if self.header.get("live_table") != "kept":
            out.append("blocks live before the window were not all kept: frees may be skipped")
        skipped = int(self.data.get("skipped_frees") or 0)
        if skipped:
            out.append(f"{skipped} frees of blocks the trace never saw were skipped")
        recorded = self.header.get("server_version") or ""
        if server_version and recorded and recorded != server_version:
            out.append(
                f"recorded under server {recorded}, compared with {server_version}: "
                "the allocation pattern may differ between versions"
            )
        return out


SEGMENT_NAME = re.compile(r"[0-9]+\.mbt")


def segments(path: Path) -> list[Path]:
    """A segmented trace's segments in their order; a trace file is its one segment."""
    if not path.is_dir():
        return [path]
    found = [p for p in path.iterdir() if SEGMENT_NAME.fullmatch(p.name) and p.is_file()]
    return sorted(found, key=lambda p: int(p.stem))


def trace_bytes(path: Path) -> int:
    """What the trace takes on disk, every segment of it."""
    return sum(p.stat().st_size for p in segments(path))


def _first(path: Path) -> Path:
    """The segment whose header tells where and when the recording began."""
    found = segments(path)
    if not found:
        raise TraceError(f"{path}: a directory with no trace segments (NNNN.mbt) in it")
    return found[0]


def _last(path: Path) -> Path:
    """The segment whose status tells how the recording ended."""
    found = segments(path)
    if not found:
        raise TraceError(f"{path}: a directory with no trace segments (NNNN.mbt) in it")
    return found[-1]


STATUS_OFFSET, STATUS_SIZE = 16, 240  # native/mbtrace.h
HEADER_SIZE, FRAME_HEADER, FRAME_MAGIC = 1024, struct.Struct("<IIII"), 0x5246424D


def set_status(path: Path, text: str) -> None:
    """Rewrite the trace's in-place status (the recorder could not: its process died, or
    the window ended for a reason only the recording command knows)."""
    raw = text.encode()[: STATUS_SIZE - 1].ljust(STATUS_SIZE, b"\0")
    with _last(path).open("r+b") as f:
        f.seek(STATUS_OFFSET)
        f.write(raw)


INFO_OFFSET = STATUS_OFFSET + STATUS_SIZE  # native/mbtrace.h: "key=value\n" lines, NUL-ended


def add_info(path: Path, items: dict[str, str]) -> bool:
    """Append `items` to the header's info lines, in place (what the recording command
    learnt beside the shim, e.g. the server's RSS); False when the header has no room
    left for them, and then nothing is written."""
    with _first(path).open("r+b") as f:
        f.seek(INFO_OFFSET)
        region = f.read(HEADER_SIZE - INFO_OFFSET)
        used = region.find(b"\0")
        if used < 0:
            return False
        lines = "".join(f"{k}={v}\n" for k, v in items.items()).encode()
        if used + len(lines) >= len(region):  # its NUL must stay
            return False
        f.seek(INFO_OFFSET + used)
        f.write(lines)
    return True


def cut_to_whole_frames(path: Path) -> int:
    """Cut a trace whose recorder was killed mid-write back to its last whole frame (by
    the frames' lengths; their checksums are the replayer's to check); its new size (of a
    segmented trace: of its last segment, the one being written; one killed before its
    header was whole is removed, and the one before it, whole, is the last)."""
    parts = segments(path)
    while path.is_dir() and len(parts) > 1 and parts[-1].stat().st_size < HEADER_SIZE:
        parts.pop().unlink()
    path = _last(path)
    size = path.stat().st_size
    at = HEADER_SIZE
    with path.open("r+b") as f:
        while at + FRAME_HEADER.size <= size:
            f.seek(at)
            magic, _, comp_len, _ = FRAME_HEADER.unpack(f.read(FRAME_HEADER.size))
            if magic != FRAME_MAGIC or at + FRAME_HEADER.size + comp_len > size:
                break
            at += FRAME_HEADER.size + comp_len
        at = min(at, size)
        f.truncate(at)
    return at


def header_status(path: Path) -> str:
    """The trace's in-place status ("complete ...", "stopped: why ..."), read from its
    header alone: the whole-trace check costs seconds of CPU on a large trace."""
    try:
        with _last(path).open("rb") as f:
            f.seek(STATUS_OFFSET)
            raw = f.read(STATUS_SIZE)
    except (OSError, TraceError):
        return ""
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def check(path: Path) -> TraceInfo:
    """Read and validate the whole trace; raise TraceError with the replayer's one line."""
    if not path.is_file() and not path.is_dir():
        raise TraceError(
            f"no trace at {path}: give the file (or the directory of segments) "
            "`mallocbench record` wrote"
        )
    proc = subprocess.run(
        [str(replayer_path()), str(path), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise TraceError(replayer_error(proc.stderr))
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}: unreadable replayer output ({exc})") from None
    return TraceInfo(path, data)
