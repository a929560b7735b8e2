"""Reports: terminal tables, Markdown, CSV/JSON exports (one module per format)."""
