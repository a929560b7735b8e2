"""Workloads: the step catalogue, the sysbench runner and the Lua scripts it runs."""
