from mallocbench.allocators._gperftools import KNOBS
from mallocbench.allocators.base import Allocator

ALLOCATOR = Allocator(
    name="tcmalloc",
    description="gperftools tcmalloc with heap profiler support",
    library_names=("libtcmalloc.so.4", "libtcmalloc.so"),
    debian_package="libgoogle-perftools4",
    soname_pattern=r"^libtcmalloc(_and_profiler)?\.so",
    knob_prefixes=("TCMALLOC_", "HEAPPROFILE", "HEAP_PROFILE_"),
    knob_family="gperftools",
    knobs=KNOBS,
    aliases=("tc",),
)
