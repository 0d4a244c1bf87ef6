"""Benchmarks run by `make bench` (`python -m benchmarks`); not part of the test suite."""
