from mallocbench.servers.engines import Engine


def _config(cache_bytes: int) -> dict[str, str]:
    return {
        "default-storage-engine": "InnoDB",
        "innodb_buffer_pool_size": str(cache_bytes),
        # A benchmark datadir is disposable: flush per second rather than per commit so
        # the allocator, not fsync, dominates the write steps (as in the seeds' configs).
        "innodb_flush_log_at_trx_commit": "2",
        "innodb_log_file_size": str(256 * 1024 * 1024),
        "innodb_doublewrite": "0",
    }


ENGINE = Engine(
    name="innodb",
    sql_engine="InnoDB",
    description="InnoDB with its buffer pool as the cache",
    config=_config,
    cache_variable="innodb_buffer_pool_size",
)
