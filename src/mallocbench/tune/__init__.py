"""`mallocbench tune`: search an allocator's knobs for the memory-against-time front.

space: the search space from the knob catalogue; objectives: what is measured and
bounded; evaluate: one setting to numbers (trace replay); search: the Optuna studies;
front: repeats and intervals, the honest front and the choices; result: what a tune
found, as values (report/tune.py renders every format of it).
"""
