# SPDX-License-Identifier: Apache-2.0
"""Benchmarks that need a model: python -m tutti.bench.ttft --help."""
