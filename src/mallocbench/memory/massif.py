"""Top allocation sites by peak bytes, from valgrind massif files and heaptrack_print output.

A server allocates almost everything through a few wrappers (my_malloc, alloc_root,
ut_allocator, operator new), so "the caller of malloc" is nearly always a wrapper. Sites
are therefore attributed to the first frame outside those wrappers, splitting a wrapper's
bytes between its callers.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mallocbench.errors import MallocbenchError

# Functions that only pass an allocation through; matched against the demangled name.
WRAPPERS = re.compile(
    r"^(my_malloc|my_realloc|my_multi_malloc|my_multi_malloc_large|my_large_malloc|my_once_alloc|"
    r"my_strdup|my_strndup|my_memdup|alloc_root|multi_alloc_root|memdup_root|strdup_root|"
    r"strmake_root|init_alloc_root|reset_root_defaults|root_alloc|my_malloc_size_cb_func|"
    r"ut_allocator<.*|ut_malloc.*|ut_zalloc.*|mem_heap_create_block_func|mem_heap_add_block|"
    r"mem_heap_create_func|mem_heap_alloc|mem_heap_zalloc|"
    r"operator new.*|operator new\[\].*|__gnu_cxx::new_allocator.*|std::allocator.*|"
    r"std::__new_allocator.*|std::allocator_traits.*|"
    r"malloc|calloc|realloc|memalign|posix_memalign|aligned_alloc|valloc|strdup|strndup|"
    r"rocksdb::port::cacheline_aligned_alloc|rocksdb::Arena::AllocateNewBlock|"
    r"rocksdb::Arena::AllocateFallback|rocksdb::Arena::AllocateAligned|"
    r"rocksdb::ConcurrentArena::.*|rocksdb::AllocateBlock)"
    r"(\(.*\))?$"
)
# Frames without a symbol (stripped builds): pass through them to the first named caller.
UNKNOWN = re.compile(r"^(\?\?\?|0x[0-9a-fA-F]+)$")


def _passes_through(function: str) -> bool:
    return bool(WRAPPERS.match(function) or UNKNOWN.match(function))


@dataclass
class Site:
    function: str
    location: str | None
    bytes: int
    stack: list[str] = field(default_factory=list)  # callers, nearest first
    calls: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Profile:
    tool: str
    command: str | None
    peak_bytes: int
    peak_extra_bytes: int | None
    sites: list[Site]
    source: str

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "command": self.command,
            "peak_bytes": self.peak_bytes,
            "peak_extra_bytes": self.peak_extra_bytes,
            "source": self.source,
            "sites": [s.to_dict() for s in self.sites[:top]],
        }


@dataclass(frozen=True)
class ProfileTop:
    """A profile as `profile` reports it: its `top` largest sites."""

    profile: Profile
    top: int


# --- massif -----------------------------------------------------------------------------


@dataclass
class _Node:
    bytes: int
    label: str
    children: list[_Node] = field(default_factory=list)

    @property
    def function(self) -> str:
        match = re.match(r"0x[0-9A-Fa-f]+: (.*?)(?: \((?:in )?[^()]*\))?$", self.label)
        return match.group(1) if match else self.label

    @property
    def location(self) -> str | None:
        match = re.search(r" \(((?:in )?[^()]*)\)$", self.label)
        return match.group(1) if match else None

    @property
    def below_threshold(self) -> bool:
        return not self.label.startswith("0x")


_NODE = re.compile(r"^( *)n(\d+): (\d+) (.*)$")


def _parse_tree(lines: list[str], start: int) -> tuple[_Node, int]:
    root: _Node | None = None
    stack: list[tuple[int, _Node]] = []
    i = start
    while i < len(lines):
        match = _NODE.match(lines[i])
        if not match:
            break
        depth = len(match.group(1))
        node = _Node(int(match.group(3)), match.group(4))
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            stack[-1][1].children.append(node)
        else:
            root = node
        stack.append((depth, node))
        i += 1
    if root is None:
        raise MallocbenchError("massif file has a heap tree with no nodes")
    return root, i


def parse_massif(path: str | Path) -> Profile:
    """The peak snapshot (or the largest detailed one) of a massif.out file, as sites."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        raise MallocbenchError(f"cannot read {path}: {exc.strerror}") from exc
    lines = text.splitlines()
    if not any(line.startswith("snapshot=") for line in lines[:50]) or not lines[0].startswith(
        "desc:"
    ):
        raise MallocbenchError(
            f"{path} is not a massif output file (it should start with 'desc:' and hold "
            "snapshot= sections, as written by valgrind --tool=massif)"
        )
    command = next((line[5:].strip() for line in lines if line.startswith("cmd:")), None)
    best: tuple[int, int, bool, _Node] | None = None  # (heap, extra, is_peak, tree)
    heap = extra = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("mem_heap_B="):
            heap = int(line.split("=", 1)[1])
        elif line.startswith("mem_heap_extra_B="):
            extra = int(line.split("=", 1)[1])
        elif line.startswith("heap_tree=") and line.strip() != "heap_tree=empty":
            is_peak = line.strip() == "heap_tree=peak"
            tree, i = _parse_tree(lines, i + 1)
            if best is None or is_peak or (not best[2] and heap > best[0]):
                best = (heap, extra, is_peak, tree)
            continue
        i += 1
    if best is None:
        raise MallocbenchError(
            f"{path} has no detailed snapshot: run massif with its default --detailed-freq, "
            "or longer, so that a heap tree is written"
        )
    heap, extra, _, tree = best
    return Profile("massif", command, heap, extra, _massif_sites(tree), str(path))


def _massif_sites(root: _Node) -> list[Site]:
    sites: dict[tuple[str, str | None], Site] = {}

    def add(node: _Node, nbytes: int, callers: list[str]) -> None:
        key = (node.function, node.location)
        site = sites.get(key)
        if site is None:
            site = sites[key] = Site(node.function, node.location, 0, callers[:4])
        site.bytes += nbytes

    def walk(node: _Node) -> None:
        if node.below_threshold:
            return
        if _passes_through(node.function) and node.children:
            covered = 0
            for child in node.children:
                if child.below_threshold:
                    continue
                walk(child)
                covered += child.bytes
            if node.bytes - covered > 0:
                add(node, node.bytes - covered, [])
            return
        callers: list[str] = []
        cursor = node
        while cursor.children and len(callers) < 4:
            cursor = max(cursor.children, key=lambda c: c.bytes)
            if cursor.below_threshold:
                break
            if not UNKNOWN.match(cursor.function):
                callers.append(cursor.function)
        add(node, node.bytes, callers)

    for child in root.children:
        walk(child)
    return sorted(sites.values(), key=lambda s: s.bytes, reverse=True)


# --- heaptrack --------------------------------------------------------------------------

_UNITS = {"B": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_PEAK = re.compile(r"^([\d.]+)([BKMGT]) peak memory consumed over (\d+) calls from$")
_SUB = re.compile(r"^([\d.]+)([BKMGT]) consumed over (\d+) calls from:$")


def _size(number: str, unit: str) -> int:
    return int(float(number) * _UNITS[unit])


def parse_heaptrack_print(text: str, source: str = "heaptrack_print") -> Profile:
    """Sites from `heaptrack_print --print-peaks` text (sizes there are decimal units)."""
    blocks, peak_total = _heaptrack_blocks(text)
    sites = _heaptrack_sites(blocks)
    if not blocks:
        raise MallocbenchError(
            f"{source} has no PEAK MEMORY CONSUMERS section: the profiled run recorded no "
            "allocations"
        )
    return Profile("heaptrack", None, peak_total, None, sites, source)


@dataclass
class Frame:
    function: str
    location: str | None = None  # file:line, or "in LIBRARY" when that is all there is


@dataclass
class HeaptrackBlock:
    """A peak consumer of heaptrack_print: its bytes and calls, its frames nearest first,
    and one sub-block per caller (sub-blocks have none of their own)."""

    bytes: int
    calls: int
    frames: list[Frame] = field(default_factory=list)
    subs: list[HeaptrackBlock] = field(default_factory=list)


def _heaptrack_blocks(text: str) -> tuple[list[HeaptrackBlock], int]:
    """The peak consumers as blocks, and the whole run's peak heap in bytes."""
    blocks: list[HeaptrackBlock] = []
    peak_total = 0
    current: HeaptrackBlock | None = None
    sub: HeaptrackBlock | None = None
    in_peaks = False
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith("PEAK MEMORY CONSUMERS"):
            in_peaks = True
            continue
        if line.startswith("peak heap memory consumption:"):
            match = re.search(r"([\d.]+)([BKMGT])", line)
            if match:
                peak_total = _size(match.group(1), match.group(2))
        if not in_peaks:
            continue
        if line and line[0].isupper() and line.isupper():
            in_peaks = False  # the next section
            continue
        match = _PEAK.match(line)
        if match:
            current = HeaptrackBlock(_size(match[1], match[2]), int(match[3]))
            blocks.append(current)
            sub = None
            continue
        match = _SUB.match(line.strip())
        if match and current is not None:
            sub = HeaptrackBlock(_size(match[1], match[2]), int(match[3]))
            current.subs.append(sub)
            continue
        stripped = line.strip()
        if not stripped or current is None:
            continue
        _add_frame(sub if sub is not None else current, stripped)
    return blocks, peak_total


def _add_frame(target: HeaptrackBlock, stripped: str) -> None:
    """A frame line, or the "at"/"in" line that gives the previous frame its location."""
    if stripped.startswith("at ") and target.frames:
        target.frames[-1].location = stripped[3:]
    elif stripped.startswith("in ") and target.frames:
        if target.frames[-1].location is None:
            target.frames[-1].location = stripped
    else:
        target.frames.append(Frame(stripped))


def _heaptrack_sites(blocks: list[HeaptrackBlock]) -> list[Site]:
    """Blocks as sites, largest first: a wrapper's block is split between its callers."""
    sites: dict[tuple[str, str | None], Site] = {}

    def add(name: str, location: str | None, nbytes: int, calls: int, callers: list[str]) -> None:
        site = sites.get((name, location))
        if site is None:
            site = sites[(name, location)] = Site(name, location, 0, callers[:4], 0)
        site.bytes += nbytes
        site.calls = (site.calls or 0) + calls

    for block in blocks:
        if not block.frames:
            continue
        top = block.frames[0]
        if _passes_through(top.function) and block.subs:
            for sub_block in block.subs:
                frames = [f for f in sub_block.frames if not _passes_through(f.function)]
                if frames:
                    add(
                        frames[0].function,
                        frames[0].location,
                        sub_block.bytes,
                        sub_block.calls,
                        [f.function for f in frames[1:]],
                    )
            continue
        callers = [f.function for f in block.subs[0].frames] if block.subs else []
        add(top.function, top.location, block.bytes, block.calls, callers)
    return sorted(sites.values(), key=lambda s: s.bytes, reverse=True)
