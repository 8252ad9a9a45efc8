"""The ``gpu`` benchmark: ``python -m benchmarks gpu --help``; README.md says what it asks and found."""
