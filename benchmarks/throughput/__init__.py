"""The ``throughput`` benchmark: ``python -m benchmarks throughput --help``; README.md says what it asks and found."""
