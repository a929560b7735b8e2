from mallocbench.allocators.base import Allocator
from mallocbench.allocators.knobs import env

ALLOCATOR = Allocator(
    name="mimalloc",
    description="Microsoft mimalloc, free-list sharding allocator",
    library_names=("libmimalloc.so.2", "libmimalloc.so"),
    debian_package="libmimalloc2.0",
    soname_pattern=r"^libmimalloc\.so",
    knob_prefixes=("MIMALLOC_",),
    aliases=("mi",),
    knob_family="mimalloc",
    # mimalloc 2.1 renamed its release options (reset -> purge); both generations are
    # listed and the installed library decides which are available.
    knobs=(
        env("purge_delay", "MIMALLOC_PURGE_DELAY", "duration", "10", unit="ms", low=-1),
        env("purge_decommits", "MIMALLOC_PURGE_DECOMMITS", "bool", "1"),
        env(
            "arena_eager_commit",
            "MIMALLOC_ARENA_EAGER_COMMIT",
            "enum",
            "2",
            choices=("0", "1", "2"),
            note="2 = only when overcommit is on",
        ),
        env("allow_large_os_pages", "MIMALLOC_ALLOW_LARGE_OS_PAGES", "bool", "0"),
        env("arena_purge_mult", "MIMALLOC_ARENA_PURGE_MULT", "int", "10", low=0),
        env("reset_delay", "MIMALLOC_RESET_DELAY", "duration", "100", unit="ms", low=0),
        env("allow_decommit", "MIMALLOC_ALLOW_DECOMMIT", "bool", "1"),
        env(
            "segment_decommit_delay",
            "MIMALLOC_SEGMENT_DECOMMIT_DELAY",
            "duration",
            "500",
            unit="ms",
            low=0,
        ),
        env("large_os_pages", "MIMALLOC_LARGE_OS_PAGES", "bool", "0"),
        env("eager_commit", "MIMALLOC_EAGER_COMMIT", "bool", "1"),
        env(
            "reserve_huge_os_pages", "MIMALLOC_RESERVE_HUGE_OS_PAGES", "int", "0", unit="GiB", low=0
        ),
    ),
)
