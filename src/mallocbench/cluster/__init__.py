"""Scale out: an experiment's blocks dispatched to benchmark hosts over mutual TLS."""
