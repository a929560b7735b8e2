"""`mallocbench doctor`: what this host has for mallocbench, and what each missing piece blocks."""
