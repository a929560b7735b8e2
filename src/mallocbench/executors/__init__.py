"""Executors: what starts servers and measures cells for the run pipeline (run.executor)."""
