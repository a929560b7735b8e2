"""Readings taken while a server runs: a process's /proc, the host's CPU and THP, its counters."""
