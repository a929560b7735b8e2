from mallocbench.allocators.base import Allocator
from mallocbench.allocators.knobs import conf

ALLOCATOR = Allocator(
    name="jemalloc",
    description="jemalloc, arena-per-CPU allocator with decay-based purging",
    library_names=("libjemalloc.so.2", "libjemalloc.so"),
    debian_package="libjemalloc2",
    soname_pattern=r"^libjemalloc\.so",
    knob_prefixes=("MALLOC_CONF", "JE_MALLOC_CONF"),
    aliases=("je",),
    knob_family="jemalloc",
    # Decay is jemalloc's own CPU-against-memory dial: -1 never purges, 0 at once.
    knobs=(
        conf("dirty_decay_ms", "duration", "10000", unit="ms", low=-1),
        conf("muzzy_decay_ms", "duration", "0", unit="ms", low=-1),
        conf("narenas", "int", "4 x CPUs", low=1),
        conf("background_thread", "bool", "false"),
        conf("max_background_threads", "int", "CPUs", low=1),
        conf("tcache", "bool", "true"),
        conf("tcache_max", "size", "32768", unit="bytes", low=0, high=8 << 20),
        conf("thp", "enum", "default", choices=("default", "always", "never")),
        conf("metadata_thp", "enum", "disabled", choices=("disabled", "auto", "always")),
        conf("percpu_arena", "enum", "disabled", choices=("disabled", "percpu", "phycpu")),
        conf("retain", "bool", "true"),
        conf("oversize_threshold", "size", "8388608", unit="bytes", low=0),
    ),
)
