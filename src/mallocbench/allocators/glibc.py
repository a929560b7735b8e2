from mallocbench.allocators.base import Allocator
from mallocbench.allocators.knobs import glibc

ALLOCATOR = Allocator(
    name="glibc",
    description="the C library's ptmalloc2 (no preload)",
    knob_prefixes=(
        "MALLOC_ARENA_",
        "MALLOC_MMAP_",
        "MALLOC_TRIM_",
        "MALLOC_TOP_PAD_",
        "MALLOC_PERTURB_",
        "MALLOC_CHECK_",
        "GLIBC_TUNABLES",
    ),
    knob_family="glibc",
    # Defaults are glibc's for 64-bit; setting trim_threshold, mmap_threshold, top_pad
    # or mmap_max turns the dynamic mmap threshold off (mallopt(3)).
    knobs=(
        glibc("arena_max", "int", "8 x cores", low=1, legacy_env="MALLOC_ARENA_MAX"),
        glibc("arena_test", "int", "8", low=1, legacy_env="MALLOC_ARENA_TEST"),
        glibc(
            "trim_threshold",
            "size",
            "131072 (dynamic)",
            unit="bytes",
            low=0,
            legacy_env="MALLOC_TRIM_THRESHOLD_",
        ),
        glibc(
            "mmap_threshold",
            "size",
            "131072 (dynamic)",
            unit="bytes",
            low=0,
            high=32 << 20,
            legacy_env="MALLOC_MMAP_THRESHOLD_",
        ),
        glibc("mmap_max", "int", "65536", low=0, high=2**31 - 1, legacy_env="MALLOC_MMAP_MAX_"),
        glibc("top_pad", "size", "131072", unit="bytes", low=0, legacy_env="MALLOC_TOP_PAD_"),
        glibc("tcache_max", "size", "1032", unit="bytes", low=0),
        glibc("tcache_count", "int", "7", low=0, high=65535),
        glibc("tcache_unsorted_limit", "int", "0", low=0),
        glibc("mxfast", "size", "128", unit="bytes", low=0, high=160),
        glibc(
            "hugetlb",
            "enum",
            "0",
            choices=("0", "1", "2"),
            note="1 = madvise THP, 2 = MAP_HUGETLB",
        ),
    ),
)
