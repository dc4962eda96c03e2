"""OpenLoopEvolve: Loop Policies as versioned, gated, reversible assets."""
__version__ = "0.1.0"
