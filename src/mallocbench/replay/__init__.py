"""Record a process's allocation calls and replay them under each allocator.

`native/mbrecord.c` (an LD_PRELOAD shim) writes the trace, `native/mbreplay.c` replays
it; this package finds both, checks traces, arms the shim in a running process
(`control`), runs the replayer per allocator and knob setting (`runner`) and summarises
the repeats with the project's statistics (`summary`).
"""
