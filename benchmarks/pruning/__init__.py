"""The ``pruning`` benchmark: ``python -m benchmarks pruning --help``; README.md says what it asks and found."""
