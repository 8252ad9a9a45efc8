"""The ``time_to_accuracy`` benchmark: ``python -m benchmarks time_to_accuracy --help``; see its README.md."""
