"""The ``auto`` benchmark: ``python -m benchmarks auto --help``; README.md says what it asks and found."""
