"""The ``cache_timing`` benchmark: ``python -m benchmarks cache_timing --help``; see its README.md."""
