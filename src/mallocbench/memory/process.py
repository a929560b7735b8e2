"""What the kernel says about a process's memory: /proc/PID/{status,smaps,smaps_rollup,maps}.

Every mapping is classified once (binary, files, buffer pool, glibc heap, thread stack,
main heap, other anonymous) so the breakdown can split RSS without double counting:
each resident page belongs to exactly one mapping, and each mapping to one kind.
"""

from __future__ import annotations

import contextlib
import enum
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from mallocbench.errors import MallocbenchError
from mallocbench.servers.cgroup import hierarchy as cgroup

# glibc's non-main arenas live in heaps of HEAP_MAX_SIZE = 2 * DEFAULT_MMAP_THRESHOLD_MAX,
# 64 MiB on 64-bit, always aligned to that size (heap_for_ptr masks pointers with it).
GLIBC_HEAP_SIZE = 64 * 1024 * 1024
# sizeof(heap_info) on 64-bit glibc (5 words + pad to 16): the arena struct of a heap
# that starts an arena sits right behind it, which is how a first heap is recognised.
_HEAP_INFO_SIZE = 48
_MAX_GUARD = 1024 * 1024
_MAX_THREAD_STACK = 256 * 1024 * 1024

# Environment variables that change how an allocator behaves (and the preload itself).
KNOB_PATTERN = re.compile(
    r"^(LD_PRELOAD|MALLOC_[A-Z_]*|GLIBC_TUNABLES|MALLOC_CONF|JE_MALLOC_CONF|TCMALLOC_[A-Z_]*|"
    r"MIMALLOC_[A-Z_]*)$"
)

KINDS = (
    "binary",  # the server executable's file pages and its static data (.bss)
    "files",  # shared libraries, other mapped files, vdso
    "buffer_pool",  # InnoDB's buffer pool mapping
    "glibc_heap",  # glibc non-main arena heaps (64 MiB reservations)
    "main_heap",  # [heap]: the brk area of glibc's main arena (or any sbrk user)
    "stack",  # thread stacks, their guard pages and the main [stack]
    "anon",  # every other anonymous mapping: large mmap'd blocks, allocator chunks
)


@dataclass
class Mapping:
    start: int
    end: int
    perms: str
    path: str
    rss: int = 0
    anonymous: int = 0
    swap: int = 0
    anon_huge: int = 0
    kind: str = "anon"

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def is_anon(self) -> bool:
        return self.path == ""

    @property
    def readable(self) -> bool:
        return self.perms.startswith("r")

    @property
    def reserved_only(self) -> bool:
        return self.perms.startswith("---")


@dataclass
class ProcessMemory:
    """One sample of a process's memory, with each mapping classified."""

    pid: int
    name: str
    exe: str | None
    rss: int  # sum of per-mapping Rss: the figure the breakdown adds up to
    vsz: int
    status: dict[str, int]  # VmRSS, RssAnon, RssFile, RssShmem, VmSwap, VmSize (bytes)
    rollup: dict[str, int]  # smaps_rollup fields (bytes)
    threads: int
    mappings: list[Mapping] = field(repr=False, default_factory=list)
    arenas: int | None = None  # glibc arenas including the main one; None if not glibc
    arena_source: ArenaCount | None = None  # how `arenas` was counted; None if not glibc
    knobs: dict[str, str] | None = None  # None: environ not readable
    # The buffer pool shared a mapping with a neighbour and, without ptrace access to
    # count its own pages, its Rss is that mapping's pro-rated by size.
    pool_prorated: bool = False

    def by_kind(self) -> dict[str, dict[str, int]]:
        out = {k: {"rss": 0, "size": 0, "count": 0} for k in KINDS}
        for m in self.mappings:
            entry = out[m.kind]
            entry["rss"] += m.rss
            entry["size"] += m.size
            # A stack is one rw mapping; its guard page is reservation only.
            if not (m.kind == "stack" and m.reserved_only):
                entry["count"] += 1
        return out

    def glibc_heaps(self) -> int:
        return sum(
            1
            for m in self.mappings
            if m.kind == "glibc_heap" and m.start % GLIBC_HEAP_SIZE == 0 and not m.reserved_only
        )

    def stack_reservation(self) -> int:
        return sum(m.size for m in self.mappings if m.kind == "stack")


def _permission_error(pid: int, what: str) -> MallocbenchError:
    return MallocbenchError(
        f"no permission to read /proc/{pid}/{what}: run mallocbench as the server's user "
        "(usually mysql) or as root"
    )


def _read(pid: int, what: str) -> str:
    try:
        return Path(f"/proc/{pid}/{what}").read_text(errors="replace")
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise MallocbenchError(f"process {pid} does not exist (or has just exited)") from exc
    except PermissionError as exc:
        raise _permission_error(pid, what) from exc


def _kib_fields(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if sep and len(parts) == 2 and parts[1] == "kB":
            out[key] = int(parts[0]) * 1024
    return out


def read_smaps(pid: int) -> list[Mapping]:
    mappings: list[Mapping] = []
    current: Mapping | None = None
    for line in _read(pid, "smaps").splitlines():
        head = line.split(maxsplit=5)
        if head and "-" in head[0] and not head[0].endswith(":") and len(head) >= 5:
            start, end = head[0].split("-")
            path = head[5].strip() if len(head) == 6 else ""
            current = Mapping(int(start, 16), int(end, 16), head[1], path)
            mappings.append(current)
            continue
        if current is None or len(head) < 2:
            continue
        key = head[0]
        if key == "Rss:":
            current.rss = int(head[1]) * 1024
        elif key == "Anonymous:":
            current.anonymous = int(head[1]) * 1024
        elif key == "Swap:":
            current.swap = int(head[1]) * 1024
        elif key == "AnonHugePages:":
            current.anon_huge = int(head[1]) * 1024
    return mappings


def read_knobs(pid: int) -> dict[str, str] | None:
    """Allocator environment in force in the process, or None when environ is unreadable."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except (OSError, PermissionError):
        return None
    knobs = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.decode(errors="replace").partition("=")
        if sep and KNOB_PATTERN.match(key):
            knobs[key] = value
    return knobs


def thread_stack_pointers(pid: int) -> list[int]:
    """Each thread's stack pointer from /proc/PID/task/TID/syscall (needs ptrace access).

    A thread blocked in a syscall reports its registers there; a running one says
    "running" and is found by the guard-page rule instead.
    """
    pointers = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tids:
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/syscall").read_text().split()
        except OSError:
            continue
        if len(fields) >= 3 and fields[-2].startswith("0x"):
            pointers.append(int(fields[-2], 16))
    return pointers


def _find(mappings: list[Mapping], address: int) -> int | None:
    lo, hi = 0, len(mappings) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        m = mappings[mid]
        if address < m.start:
            hi = mid - 1
        elif address >= m.end:
            lo = mid + 1
        else:
            return mid
    return None


def _classify_files(mappings: list[Mapping], exe: str | None) -> None:
    previous_was_binary = False
    for m in mappings:
        if m.path.startswith("/") or m.path in ("[vdso]", "[vvar]", "[vsyscall]"):
            is_binary = exe is not None and m.path.removesuffix(" (deleted)") == exe
            m.kind = "binary" if is_binary else "files"
            previous_was_binary = is_binary
            continue
        if m.path == "[heap]":
            m.kind = "main_heap"
        elif m.path == "[stack]":
            m.kind = "stack"
        elif m.is_anon and previous_was_binary:
            # The executable's .bss follows its last file mapping: static data, not heap.
            m.kind = "binary"
        previous_was_binary = False


def _classify_buffer_pool(
    pid: int, mappings: list[Mapping], pool_size: int | None
) -> tuple[Mapping | None, bool]:
    """Find the buffer pool mapping; return it and whether its Rss had to be estimated.

    The pool is one anonymous mapping of innodb_buffer_pool_size; MariaDB 10.11 maps it
    at the front of a larger innodb_buffer_pool_size_max reservation (PROT_NONE). The
    kernel merges it with an adjacent read-write anonymous mapping (a glibc heap that
    grew to its full 64 MiB, say), so when no mapping has the right size the pool is
    taken as the last pool_size bytes before the reservation and that mapping is split,
    counting its resident pages from /proc/PID/pagemap.
    """
    if not pool_size:
        return None, False
    candidates = [
        m
        for m in mappings
        if m.kind == "anon"
        and m.is_anon
        and not m.reserved_only
        and pool_size * 0.98 <= m.size <= pool_size * 1.10
    ]
    prorated = False
    if candidates:
        best = max(candidates, key=lambda m: m.rss)
    else:
        best = None
        for i, m in enumerate(mappings[:-1]):
            reservation = mappings[i + 1]
            if (
                m.kind == "anon"
                and m.is_anon
                and not m.reserved_only
                and m.size > pool_size * 1.10
                and m.size > GLIBC_HEAP_SIZE
                and reservation.is_anon
                and reservation.reserved_only
                and reservation.start == m.end
                and reservation.size >= pool_size
            ):
                best, prorated = _split_tail(pid, mappings, i, pool_size)
                break
    if best is None:
        return None, False
    best.kind = "buffer_pool"
    index = mappings.index(best)
    following = mappings[index + 1] if index + 1 < len(mappings) else None
    if following and following.is_anon and following.reserved_only and following.start == best.end:
        following.kind = "buffer_pool"  # the resize reservation: VSZ only
    return best, prorated


def resident_pages(pid: int, start: int, end: int) -> int | None:
    """Resident pages in [start, end) from /proc/PID/pagemap (bit 63 of each entry)."""
    page = os.sysconf("SC_PAGE_SIZE")
    count = 0
    try:
        with open(f"/proc/{pid}/pagemap", "rb", buffering=0) as pagemap:
            address = start
            chunk_pages = 1 << 16
            while address < end:
                n = min(chunk_pages, (end - address) // page)
                pagemap.seek(address // page * 8)
                data = pagemap.read(n * 8)
                if len(data) != n * 8:
                    return None
                # The top byte of each little-endian entry holds "present" in its top bit.
                count += data[7::8].translate(_PRESENT).count(1)
                address += n * page
    except OSError:
        return None
    return count


_PRESENT = bytes(1 if b & 0x80 else 0 for b in range(256))


def _split_tail(pid: int, mappings: list[Mapping], index: int, tail: int) -> tuple[Mapping, bool]:
    merged = mappings[index]
    cut = merged.end - tail
    pages = resident_pages(pid, cut, merged.end)
    if pages is None:
        # No ptrace access: assume the front part is as dense as the whole mapping.
        tail_rss = merged.rss * tail // merged.size
    else:
        tail_rss = min(merged.rss, pages * os.sysconf("SC_PAGE_SIZE"))
    ratio = tail_rss / merged.rss if merged.rss else 0
    front = Mapping(
        merged.start,
        cut,
        merged.perms,
        merged.path,
        rss=merged.rss - tail_rss,
        anonymous=merged.anonymous - int(merged.anonymous * ratio),
        swap=merged.swap,
        anon_huge=merged.anon_huge - int(merged.anon_huge * ratio),
    )
    back = Mapping(
        cut,
        merged.end,
        merged.perms,
        merged.path,
        rss=tail_rss,
        anonymous=int(merged.anonymous * ratio),
        anon_huge=int(merged.anon_huge * ratio),
    )
    mappings[index : index + 1] = [front, back]
    return back, pages is None


def _read_words(pid: int, address: int, count: int) -> list[int] | None:
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            mem.seek(address)
            data = mem.read(8 * count)
    except OSError:
        return None
    if len(data) != 8 * count:
        return None
    return [int.from_bytes(data[i : i + 8], "little") for i in range(0, len(data), 8)]


class ArenaCount(enum.Enum):
    """How a glibc arena count was found (report/memory.py words it)."""

    HEAP_INFO = "heap_info"  # each heap's heap_info header, read from /proc/PID/mem
    MAPS = "maps"  # 64 MiB heap mappings in /proc/PID/maps, unverified without ptrace


def _classify_glibc_heaps(pid: int, mappings: list[Mapping]) -> tuple[int | None, ArenaCount]:
    """Mark glibc arena heaps; return (arenas incl. main, how that number was found).

    The precise way reads each candidate heap's heap_info header from /proc/PID/mem:
    a heap whose `prev` is NULL and whose `ar_ptr` points just behind the header starts
    an arena. Without ptrace access the count falls back to 64 MiB-aligned mappings that
    end on a 64 MiB boundary (one per heap; an arena that outgrew one heap counts twice).
    """
    verified: dict[int, bool] = {}  # heap start -> starts an arena
    mem_readable = None
    for m in mappings:
        if m.kind != "anon" or not m.is_anon or m.reserved_only:
            continue
        first = -(-m.start // GLIBC_HEAP_SIZE) * GLIBC_HEAP_SIZE
        for address in range(first, m.end, GLIBC_HEAP_SIZE):
            words = _read_words(pid, address, 4)
            if words is None:
                mem_readable = False if mem_readable is None else mem_readable
                break
            mem_readable = True
            ar_ptr, prev, size, mprotect_size = words
            page_ok = size % 4096 == 0 and 0 < size <= GLIBC_HEAP_SIZE
            if not page_ok or mprotect_size > GLIBC_HEAP_SIZE:
                continue
            if prev == 0 and ar_ptr == address + _HEAP_INFO_SIZE:
                verified[address] = True
            elif prev % GLIBC_HEAP_SIZE == 0 and prev != 0 and ar_ptr != 0:
                verified[address] = False
    if mem_readable:
        # Continuation heaps must chain back to a verified heap; drop stray matches.
        for address, starts in list(verified.items()):
            if not starts:
                words = _read_words(pid, address, 2)
                if not words or words[1] not in verified:
                    verified.pop(address)
        for address in verified:
            _mark_heap(mappings, address)
        return 1 + sum(verified.values()), ArenaCount.HEAP_INFO
    heaps = 0
    for i, m in enumerate(mappings):
        if m.kind != "anon" or not m.is_anon or m.start % GLIBC_HEAP_SIZE:
            continue
        end = m.end
        j = i + 1
        while (
            end % GLIBC_HEAP_SIZE
            and j < len(mappings)
            and mappings[j].start == end
            and mappings[j].is_anon
            and mappings[j].reserved_only
        ):
            end = mappings[j].end
            j += 1
        if end - m.start == GLIBC_HEAP_SIZE:
            heaps += 1
            for k in range(i, j):
                mappings[k].kind = "glibc_heap"
    return 1 + heaps, ArenaCount.MAPS


def _mark_heap(mappings: list[Mapping], address: int) -> None:
    index = _find(mappings, address)
    if index is None:
        return
    end = address + GLIBC_HEAP_SIZE
    while index < len(mappings) and mappings[index].start < end:
        if mappings[index].kind == "anon" and mappings[index].is_anon:
            mappings[index].kind = "glibc_heap"
        index += 1


def _classify_stacks(pid: int, mappings: list[Mapping]) -> None:
    def mark(index: int) -> None:
        m = mappings[index]
        if m.kind != "anon" or not m.is_anon or m.reserved_only or m.size > _MAX_THREAD_STACK:
            return
        m.kind = "stack"
        if index > 0:
            guard = mappings[index - 1]
            if guard.is_anon and guard.reserved_only and guard.end == m.start:
                guard.kind = "stack"

    for sp in thread_stack_pointers(pid):
        index = _find(mappings, sp)
        if index is not None:
            mark(index)
    # pthread stacks sit right above a small PROT_NONE guard; glibc heaps are the other
    # way round (usable part first, then PROT_NONE), so this does not catch them.
    for i in range(1, len(mappings)):
        guard, m = mappings[i - 1], mappings[i]
        if (
            guard.kind == "anon"
            and guard.is_anon
            and guard.reserved_only
            and guard.size <= _MAX_GUARD
            and guard.end == m.start
            and m.size <= 64 * 1024 * 1024
        ):
            mark(i)


def classify(
    pid: int,
    mappings: list[Mapping],
    exe: str | None,
    allocator: str,
    buffer_pool_size: int | None,
) -> tuple[int | None, ArenaCount | None, bool]:
    """Give every mapping a kind; return (glibc arenas, how counted, whether the buffer
    pool's Rss is pro-rated)."""
    _classify_files(mappings, exe)
    _, prorated = _classify_buffer_pool(pid, mappings, buffer_pool_size)
    arenas: int | None = None
    source = None
    if allocator == "glibc":
        arenas, source = _classify_glibc_heaps(pid, mappings)
    _classify_stacks(pid, mappings)
    return arenas, source, prorated


def sample(
    pid: int, allocator: str = "glibc", buffer_pool_size: int | None = None
) -> ProcessMemory:
    """Read and classify the memory of `pid` (one consistent pass over smaps)."""
    try:
        proc = psutil.Process(pid)
        name = proc.name()
    except psutil.NoSuchProcess as exc:
        raise MallocbenchError(f"process {pid} does not exist (or has just exited)") from exc
    exe: str | None = None
    with contextlib.suppress(OSError):
        exe = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    status_text = _read(pid, "status")
    status = _kib_fields(status_text)
    threads_match = re.search(r"^Threads:\s+(\d+)", status_text, re.M)
    mappings = read_smaps(pid)
    try:
        rollup = _kib_fields(_read(pid, "smaps_rollup"))
    except MallocbenchError:
        rollup = {}
    arenas, source, prorated = classify(pid, mappings, exe, allocator, buffer_pool_size)
    return ProcessMemory(
        pid=pid,
        name=name,
        exe=exe,
        rss=sum(m.rss for m in mappings),
        vsz=status.get("VmSize", sum(m.size for m in mappings)),
        status=status,
        rollup=rollup,
        threads=int(threads_match.group(1)) if threads_match else 0,
        mappings=mappings,
        arenas=arenas,
        arena_source=source,
        knobs=read_knobs(pid),
        pool_prorated=prorated,
    )


THP_DIR = Path("/sys/kernel/mm/transparent_hugepage")


@dataclass
class ThpSetup:
    """How transparent huge pages are set up, for the host and for one process."""

    mode: str | None  # enabled: always, madvise or never
    defrag: str | None  # always, defer, defer+madvise, madvise or never
    # How many empty small pages khugepaged may fill to make a huge page (of 511).
    max_ptes_none: int | None
    # True: prctl(PR_SET_THP_DISABLE) keeps THP off for the process (status THP_enabled: 0);
    # None: the kernel does not say (before 3.15), or status was unreadable.
    process_disabled: bool | None


def _bracketed(path: Path) -> str | None:
    try:
        match = re.search(r"\[([\w+]+)\]", path.read_text())
    except OSError:
        return None
    return match.group(1) if match else None


def read_thp(pid: int | None, sysfs: Path = THP_DIR, proc: Path = Path("/proc")) -> ThpSetup:
    """The host's THP settings, and whether `pid` has THP disabled (None: not asked)."""
    max_ptes: int | None = None
    with contextlib.suppress(OSError, ValueError):
        max_ptes = int((sysfs / "khugepaged" / "max_ptes_none").read_text())
    disabled: bool | None = None
    if pid is not None:
        with contextlib.suppress(OSError):
            status = (proc / str(pid) / "status").read_text()
            match = re.search(r"^THP_enabled:\s*(\d)", status, re.M)
            disabled = match.group(1) == "0" if match else None
    return ThpSetup(_bracketed(sysfs / "enabled"), _bracketed(sysfs / "defrag"), max_ptes, disabled)


@dataclass
class MemoryLimit:
    """The most memory the process can have, and what sets that bound."""

    bytes: int
    group: cgroup.CgroupLimit | None = None  # the group whose limit it is; None: MemTotal


def memory_limit(pid: int) -> MemoryLimit:
    """The smaller of physical memory and the limit of the process's memory cgroup (v1 or
    v2, its ancestors included), with the group that sets it."""
    total = psutil.virtual_memory().total
    limit = cgroup.memory_limit_of(pid)
    if limit is not None and limit.bytes < total:
        return MemoryLimit(limit.bytes, limit)
    return MemoryLimit(total)
