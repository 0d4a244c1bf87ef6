"""Benchmarks: `python -m benchmarks` runs every module's `main()`; see docs/benchmarks.md."""
