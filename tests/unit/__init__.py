"""Unit tests: one file per sbdata module, oracle models with known per-sample losses."""
