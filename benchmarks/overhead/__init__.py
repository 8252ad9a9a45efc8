"""The ``overhead`` benchmark: ``python -m benchmarks overhead --help``; README.md says what it asks and found."""
