"""The ``streaming`` benchmark: ``python -m benchmarks streaming --help``; README.md says what it asks and found."""
