"""Allocation patterns: a native driver replaying database-shaped allocation patterns
under each allocator, and the experiment, store and report around it."""
