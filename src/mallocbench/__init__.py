"""mallocbench: compare memory allocators on real database servers and explain their memory."""

__version__ = "0.1.0"
