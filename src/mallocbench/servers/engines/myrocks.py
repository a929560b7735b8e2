from mallocbench.servers.engines import Engine


def _config(cache_bytes: int) -> dict[str, str]:
    return {
        "plugin-load-add": "ha_rocksdb.so",
        "default-storage-engine": "ROCKSDB",
        "rocksdb_block_cache_size": str(cache_bytes),
        # InnoDB still hosts nothing here; keep its pool small so RSS is RocksDB's.
        "innodb_buffer_pool_size": str(32 * 1024 * 1024),
        "rocksdb_flush_log_at_trx_commit": "2",
    }


ENGINE = Engine(
    name="myrocks",
    sql_engine="ROCKSDB",
    description="MyRocks (RocksDB plugin) with its block cache as the cache",
    config=_config,
    cache_variable="rocksdb_block_cache_size",
)
