"""python -m tutti.bench.ttft answers --help and refuses bad arguments anywhere; without a GPU
and transformers it says so and exits 77 (skipped), instead of failing."""
import subprocess
import sys

import pytest


def ttft(*args):
    return subprocess.run([sys.executable, "-m", "tutti.bench.ttft", *args], capture_output=True, text=True)


def test_help_names_every_mode():
    r = ttft("--help")
    assert r.returncode == 0
    for mode in ("recompute", "floor", "layerwise", "load_all", "per_block", "hybrid", "store"):
        assert mode in r.stdout


def test_bad_arguments_are_refused():
    r = ttft("--tokens", "4096", "--prefix", "100")
    assert r.returncode == 2 and "multiple of 256" in r.stderr
    r = ttft("--modes", "fast")
    assert r.returncode == 2 and "mode 'fast'" in r.stderr
    r = ttft("--source", "ssd=/tmp/x")
    assert r.returncode == 2 and "NAME=PATH" in r.stderr


def test_without_gpu_or_transformers_it_skips():
    try:
        import torch
        import transformers  # noqa: F401
        if torch.cuda.is_available():
            pytest.skip("this machine can run the benchmark")
    except ImportError:
        pass
    r = ttft("--tokens", "4096", "--prefix", "1024")
    assert r.returncode == 77 and "ttft:" in r.stderr
