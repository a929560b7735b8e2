"""The explain half: a running server's RSS accounted for, watched, advised on; heap profiles."""
