from mallocbench.allocators.base import Allocator

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
)
