from mallocbench.allocators.base import Allocator

ALLOCATOR = Allocator(
    name="mimalloc",
    description="Microsoft mimalloc, free-list sharding allocator",
    library_names=("libmimalloc.so.2", "libmimalloc.so"),
    debian_package="libmimalloc2.0",
    soname_pattern=r"^libmimalloc\.so",
    knob_prefixes=("MIMALLOC_",),
    aliases=("mi",),
)
