"""Memory and cpu cgroups: where a process is charged, its OOM kills, groups of our own."""
