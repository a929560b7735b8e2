"""Private database servers: datadir, config, start under an allocator, verify, stop."""
