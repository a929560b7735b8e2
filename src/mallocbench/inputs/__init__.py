"""Input files read with every problem located at its file, line and column."""
