"""The results model that stores, analyses and reports share: a run's cells and metadata."""
