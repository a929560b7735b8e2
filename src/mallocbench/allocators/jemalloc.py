from mallocbench.allocators.base import Allocator

ALLOCATOR = Allocator(
    name="jemalloc",
    description="jemalloc, arena-per-CPU allocator with decay-based purging",
    library_names=("libjemalloc.so.2", "libjemalloc.so"),
    debian_package="libjemalloc2",
    soname_pattern=r"^libjemalloc\.so",
    knob_prefixes=("MALLOC_CONF", "JE_MALLOC_CONF"),
    aliases=("je",),
)
