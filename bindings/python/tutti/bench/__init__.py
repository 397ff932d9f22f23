"""Benchmarks that need a model: python -m tutti.bench.ttft --help."""
