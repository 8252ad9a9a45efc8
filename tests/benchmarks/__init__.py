"""End to end: the examples and the benchmarks smoke modes, run as a user runs them."""
