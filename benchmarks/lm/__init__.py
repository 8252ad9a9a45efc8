"""The ``lm`` benchmark: ``python -m benchmarks lm --help``; README.md says what it asks and found."""
