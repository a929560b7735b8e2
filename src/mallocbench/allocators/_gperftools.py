"""The knobs both gperftools builds (tcmalloc, tcmalloc_minimal) read."""

from mallocbench.allocators.knobs import env

KNOBS = (
    env("release_rate", "TCMALLOC_RELEASE_RATE", "float", "1.0", low=0, high=10),
    env(
        "max_total_thread_cache_bytes",
        "TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES",
        "size",
        "33554432",
        unit="bytes",
        low=0,
        note="clamped to 512 KiB..1 GiB",
    ),
    env("aggressive_decommit", "TCMALLOC_AGGRESSIVE_DECOMMIT", "bool", "false"),
    env("heap_limit_mb", "TCMALLOC_HEAP_LIMIT_MB", "int", "0 (none)", unit="MiB", low=0),
    env("transfer_num_obj", "TCMALLOC_TRANSFER_NUM_OBJ", "int", "512", low=1),
)
