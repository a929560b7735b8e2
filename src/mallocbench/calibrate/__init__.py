"""Calibration: how noisy this host is now, and which design and repeats that asks for.

`target` names the one cell calibrated, `measure` starts servers and measures it,
`summary` turns the measurements into noise components, costs and plans (the statistics
are analysis.noise's), `store` keeps a calibration per host for `auto`, which picks a
run's design from one. The words and tables are report.calibrate's.
"""
