"""What jemalloc says it keeps: the statistics it prints into the server's error log.

No process can ask another's jemalloc for its statistics; jemalloc prints them itself to
stderr, which a server sends to its error log: at exit with MALLOC_CONF=stats_print:true,
and while it runs, every N bytes allocated, with stats_interval:N (jemalloc 5.3+). Both
the JSON form (stats_print_opts / stats_interval_opts with J) and the text form are read.

A log holds the prints of every earlier incarnation of the server too: only what follows
the line in which the running process announced its pid belongs to it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# What a live server needs to print its statistics now and then: once every 16 GiB
# allocated (a busy server allocates GiBs a minute: more often floods its log), as JSON
# totals only (~1 KiB): no general section, per-arena, size-class or mutex tables.
STATS_INTERVAL_CONF = "stats_interval:17179869184,stats_interval_opts:Jgablxeh"
# At exit there is one print: it may carry the options in force too.
STATS_AT_EXIT_CONF = "stats_print:true,stats_print_opts:Jablxeh"

# Read at most this much of a log's end: stats blocks are a few hundred KiB at most.
_TAIL_BYTES = 16 * 1024 * 1024

_TEXT_BEGIN = "___ Begin jemalloc statistics ___"
_TEXT_END = "--- End jemalloc statistics ---"
_TEXT_TOTALS = re.compile(
    r"Allocated: (\d+), active: (\d+), metadata: (\d+).*?resident: (\d+), mapped: (\d+), "
    r"retained: (\d+)"
)
_TEXT_DECAY = re.compile(r"^\s*(dirty|muzzy):\s+(\S+)\s+(\d+)", re.M)
_TEXT_PAGE = re.compile(r"^Page size: (\d+)", re.M)
_TEXT_OPT = re.compile(r"^\s*opt\.(background_thread|dirty_decay_ms|muzzy_decay_ms): (\S+)", re.M)
_JSON_START = '{"jemalloc":'


@dataclass
class JemallocStats:
    """jemalloc's own totals (bytes), as of the moment it printed them."""

    allocated: int  # what the program holds
    active: int  # pages of live allocations
    metadata: int
    resident: int  # jemalloc's pages in RSS: active, dirty, muzzy and metadata
    mapped: int
    # Address space kept mapped for reuse but already given back to the kernel: not in RSS.
    retained: int
    dirty: int  # freed, not yet purged: in RSS until decay purges them
    muzzy: int  # purged with MADV_FREE: in RSS (LazyFree) until the kernel reclaims them
    dirty_decay_ms: int | None
    muzzy_decay_ms: int | None
    background_thread: bool | None
    printed_by: int  # the pid whose start line comes before the print
    prints: int  # how many prints that process made; the last one is shown


def _json_blocks(text: str) -> list[dict[str, Any]]:
    blocks = []
    decoder = json.JSONDecoder()
    start = text.find(_JSON_START)
    while start >= 0:
        try:
            data, end = decoder.raw_decode(text, start)
        except ValueError:
            end = start + len(_JSON_START)
        else:
            if isinstance(data, dict) and isinstance(data.get("jemalloc"), dict):
                blocks.append(data["jemalloc"])
        start = text.find(_JSON_START, end)
    return blocks


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _from_json(block: dict[str, Any], pid: int, prints: int) -> JemallocStats | None:
    stats = block.get("stats") or {}
    arenas = block.get("stats.arenas") or {}
    # jemalloc merges the arenas only when it has more than one; else arena "0" is all.
    merged = arenas.get("merged") or (arenas.get("0") if len(arenas) == 1 else None) or {}
    opt = block.get("opt") or {}
    page = _int((block.get("arenas") or {}).get("page")) or 4096
    fields = [_int(stats.get(k)) for k in ("allocated", "active", "metadata", "resident")]
    fields += [_int(stats.get(k)) for k in ("mapped", "retained")]
    pdirty, pmuzzy = _int(merged.get("pdirty")), _int(merged.get("pmuzzy"))
    if any(f is None for f in fields) or pdirty is None or pmuzzy is None:
        return None
    allocated, active, metadata, resident, mapped, retained = (int(f or 0) for f in fields)
    background = opt.get("background_thread")
    return JemallocStats(
        allocated,
        active,
        metadata,
        resident,
        mapped,
        retained,
        dirty=pdirty * page,
        muzzy=pmuzzy * page,
        dirty_decay_ms=_int(opt.get("dirty_decay_ms")),
        muzzy_decay_ms=_int(opt.get("muzzy_decay_ms")),
        background_thread=background if isinstance(background, bool) else None,
        printed_by=pid,
        prints=prints,
    )


def _text_blocks(text: str) -> list[str]:
    blocks = []
    start = text.find(_TEXT_BEGIN)
    while start >= 0:
        end = text.find(_TEXT_END, start)
        if end < 0:
            break
        blocks.append(text[start:end])
        start = text.find(_TEXT_BEGIN, end)
    return blocks


def _from_text(block: str, pid: int, prints: int) -> JemallocStats | None:
    totals = _TEXT_TOTALS.search(block)
    # The merged arenas' section comes first, with one arena there is only arenas[0]; the
    # rows of other arenas follow and must not be taken for the totals.
    if "Merged arenas stats:" in block:
        merged = block[block.find("Merged arenas stats:") :]
    elif block.count("arenas[") == 1:
        merged = block[block.find("arenas[") :]
    else:
        merged = ""
    decay = {m.group(1): int(m.group(3)) for m in reversed(list(_TEXT_DECAY.finditer(merged)))}
    if totals is None or "dirty" not in decay or "muzzy" not in decay:
        return None
    page_match = _TEXT_PAGE.search(block)
    page = int(page_match.group(1)) if page_match else 4096
    opts = {m.group(1): m.group(2) for m in _TEXT_OPT.finditer(block)}

    def decay_ms(name: str) -> int | None:
        value = opts.get(name, "")
        return int(value) if re.fullmatch(r"-?\d+", value) else None

    allocated, active, metadata, resident, mapped, retained = (int(g) for g in totals.groups())
    background = opts.get("background_thread")
    return JemallocStats(
        allocated,
        active,
        metadata,
        resident,
        mapped,
        retained,
        dirty=decay["dirty"] * page,
        muzzy=decay["muzzy"] * page,
        dirty_decay_ms=decay_ms("dirty_decay_ms"),
        muzzy_decay_ms=decay_ms("muzzy_decay_ms"),
        background_thread=None if background is None else background == "true",
        printed_by=pid,
        prints=prints,
    )


def _since_start_of(text: str, pid: int) -> str | None:
    """The part of an error log written by process `pid`; None when its start is not there."""
    # MariaDB's start line: "Starting MariaDB <version> ... as process <pid>"; MySQL's:
    # "... starting as process <pid>".
    starts = list(re.finditer(rf"\bas process {pid}\b", text))
    if not starts:
        return None
    own = text[starts[-1].end() :]
    # A pid may come round again: what follows the next process's start is not ours.
    after = re.search(r"\bas process \d+\b", own)
    return own[: after.start()] if after else own


def stats_in_log(text: str, pid: int) -> JemallocStats | None:
    """The last statistics jemalloc printed in process `pid`, from its error log's text."""
    own = _since_start_of(text, pid)
    if own is None:
        return None
    json_blocks = _json_blocks(own)
    text_blocks = _text_blocks(own)
    # Whichever form came last: a restart with other options may have switched forms,
    # but never within one process.
    if json_blocks and (not text_blocks or own.rfind(_JSON_START) > own.rfind(_TEXT_BEGIN)):
        return _from_json(json_blocks[-1], pid, len(json_blocks))
    if text_blocks:
        return _from_text(text_blocks[-1], pid, len(text_blocks))
    return None


def read_log_tail(path: Path) -> str | None:
    """The end of an error log; None when it cannot be read."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - _TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None


def stats_from_log(path: Path, pid: int) -> JemallocStats | None:
    """The last statistics jemalloc printed in process `pid` into the log at `path`."""
    text = read_log_tail(path)
    return None if text is None else stats_in_log(text, pid)
