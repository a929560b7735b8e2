from mallocbench.allocators._gperftools import KNOBS
from mallocbench.allocators.base import Allocator

ALLOCATOR = Allocator(
    name="tcmalloc_minimal",
    description="gperftools tcmalloc without profiler (what malloc-lib setups usually load)",
    library_names=("libtcmalloc_minimal.so.4", "libtcmalloc_minimal.so"),
    debian_package="libtcmalloc-minimal4",
    soname_pattern=r"^libtcmalloc_minimal\.so",
    knob_prefixes=("TCMALLOC_",),
    knob_family="gperftools",
    knobs=KNOBS,
    aliases=("tcmin",),
)
