# SPDX-License-Identifier: Apache-2.0
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
    for mode in ("recompute", "floor", "layerwise", "load_all", "per_block", "hybrid", "store", "floor_spin"):
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


def test_every_row_of_a_tiny_sweep_on_the_cpu(tmp_path):
    """The whole benchmark with the in-repo model on the CPU: every mode runs, every load gives
    the floor's logits bit for bit and the recompute's greedy token, and a second call with
    the same output resumes (adds nothing). Its times mean nothing here."""
    pytest.importorskip("torch", reason="torch is not installed here")
    pytest.importorskip("numpy", reason="numpy is not installed here")
    import json
    import os
    out = tmp_path / "rows.jsonl"
    shm = f"/dev/shm/tutti-test-ttft-{os.getpid()}.pool"
    args = ["--engine", "reference", "--device", "cpu", "--model", "tiny", "--tokens", "512", "--prefix", "256",
            "--source", f"disk={tmp_path / 'pool'}@posix", "--source", f"dram={shm}", "--repeat", "1",
            "--out", str(out)]
    r = ttft(*args)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    modes = {(x["mode"], x["source"]) for x in rows}
    for mode in ("load_all", "layerwise", "hybrid", "store"):
        assert (mode, "disk") in modes and (mode, "dram") in modes
    assert ("per_block", "disk") in modes and ("recompute", "none") in modes and ("floor", "hbm") in modes
    assert not any(x["mode"] == "floor_spin" for x in rows)  # a diagnostic, asked for by name only
    for x in rows:
        assert x["logits_match"] is (None if x["mode"] == "recompute" else True), x  # recompute: the reference
        if x["mode"] not in ("recompute", "floor") and x.get("load_tokens", 1):
            assert x["logits_equal_floor"], x
    assert all("decision" in x for x in rows if x["mode"] == "hybrid")
    # A store row says when the other prompt's store was done (before or after the first token).
    assert all(x["store_s"] > 0 and x["ttft_s"] > 0 for x in rows if x["mode"] == "store")
    assert not os.path.exists(shm)
    r = ttft(*args)
    assert r.returncode == 0, r.stderr
    assert len(out.read_text().splitlines()) == len(rows)


def test_floor_spin_is_asked_for_by_name_and_needs_cuda(tmp_path):
    """floor_spin is a diagnostic: not in the default sweep (above), and on the CPU it says it
    is skipped and writes no row."""
    pytest.importorskip("torch", reason="torch is not installed here")
    import json
    out = tmp_path / "rows.jsonl"
    r = ttft("--engine", "reference", "--device", "cpu", "--model", "tiny", "--tokens", "512", "--prefix", "256",
             "--repeat", "1", "--modes", "floor,floor_spin", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "floor_spin: CUDA only (skipped)" in r.stderr
    assert {json.loads(line)["mode"] for line in out.read_text().splitlines()} == {"recompute", "floor"}


def test_a_remote_source_loads_every_chunk_from_the_cluster(tmp_path):
    """The remote source on a Redis Cluster of its own (tools/redis-cluster): the prompt is
    written through from one runtime and loaded by another with an empty pool, layer by layer,
    and gives the floor's logits bit for bit."""
    pytest.importorskip("torch", reason="torch is not installed here")
    pytest.importorskip("numpy", reason="numpy is not installed here")
    import json
    import os
    import random
    import shutil
    if not shutil.which("redis-server") or not shutil.which("redis-cli"):
        pytest.skip("redis-server or redis-cli not found (Debian: redis-server redis-tools)")
    tools = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tools", "redis-cluster")
    rc = str(tmp_path / "rc")
    start = subprocess.run([tools, "start", rc, str(10000 + random.randrange(1100) * 10)], capture_output=True, text=True)
    assert start.returncode == 0, start.stdout + start.stderr
    try:
        out = tmp_path / "rows.jsonl"
        r = ttft("--engine", "reference", "--device", "cpu", "--model", "tiny", "--tokens", "512", "--prefix", "256",
                 "--source", f"remote={tmp_path / 'pool'}", "--remote", start.stdout.strip(), "--repeat", "1",
                 "--modes", "recompute,floor,layerwise,load_all,store,per_block", "--out", str(out))
        assert r.returncode == 0, r.stderr
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        loads = [x for x in rows if x["source"] == "remote"]
        assert sorted(x["mode"] for x in loads) == ["layerwise", "load_all"], rows  # no store or per-block rows
        assert all(x["logits_equal_floor"] and x["load_gbps"] > 0 for x in loads), loads
    finally:
        subprocess.run([tools, "stop", rc], capture_output=True)


def docqa(*args):
    return subprocess.run([sys.executable, "-m", "tutti.bench.docqa", *args], capture_output=True, text=True)


def test_docqa_refuses_bad_arguments():
    assert docqa("--help").returncode == 0
    r = docqa("--docs", "3x100", "--source", "disk=/tmp/x")
    assert r.returncode == 2 and "COUNTxTOKENS" in r.stderr
    r = docqa("--docs", "3x1024")
    assert r.returncode == 2 and "--source" in r.stderr


def test_docqa_on_the_cpu(tmp_path):
    """The long-document workload with the in-repo model on the CPU: every document is stored in
    the warm-up round, and every query that loads it gives the recompute's first token."""
    pytest.importorskip("torch", reason="torch is not installed here")
    pytest.importorskip("numpy", reason="numpy is not installed here")
    import json
    out = tmp_path / "docqa.jsonl"
    r = docqa("--engine", "reference", "--device", "cpu", "--model", "tiny", "--docs", "3x600,2x300",
              "--question", "20", "--source", f"disk={tmp_path / 'pool'}@posix", "--out", str(out))
    assert r.returncode == 0, r.stderr
    rows = {x["mode"]: x for x in map(json.loads, out.read_text().splitlines())}
    assert rows["tutti"]["logits_equal_floor"] == "5/5" and rows["tutti"]["logits_match"] == "5/5"
    assert rows["tutti"]["loaded_tokens"] == 3 * 512 + 2 * 256  # every document's whole chunks
    assert len(rows["recompute"]["ttft_s"]) == len(rows["tutti"]["ttft_s"]) == 5
    assert not (tmp_path / "pool").exists()


def test_profile_then_policy_then_hybrid_rows_on_the_cpu(tmp_path):
    """python -m tutti.profile measures a source and saves its profile; python -m tutti.policy
    decides from the file; the bench's hybrid rows decide from it with --profile."""
    pytest.importorskip("torch", reason="torch is not installed here")
    pytest.importorskip("numpy", reason="numpy is not installed here")
    import json
    from tutti.policy import Profile
    cpu = ["--engine", "reference", "--device", "cpu", "--model", "tiny", "--tokens", "512"]
    r = subprocess.run([sys.executable, "-m", "tutti.profile", *cpu, "--repeat", "1",
                        "--source", f"disk={tmp_path / 'pool'}@posix", "--out", str(tmp_path / "prof")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    p = Profile.load(str(tmp_path / "prof" / "tiny-disk.json"))
    assert p.layers == 4 and p.backend == "posix" and p.load_bytes_per_s > 0 and p.load_latency_s > 0
    assert len(p.samples) >= 3
    r = subprocess.run([sys.executable, "-m", "tutti.policy", "--profile", str(tmp_path / "prof" / "tiny-disk.json"),
                        "--tokens", "512", "--prefix", "256"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["recompute"] + d["load"] == 256 and d["reason"]
    out = tmp_path / "rows.jsonl"
    r = ttft(*cpu, "--prefix", "256", "--modes", "hybrid", "--repeat", "1", "--profile", str(tmp_path / "prof"),
             "--source", f"disk={tmp_path / 'pool2'}@posix", "--out", str(out))
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines() if '"hybrid"' in x]
    assert len(rows) == 1 and rows[0]["profile"]["load_bytes_per_s"] == p.load_bytes_per_s
    assert rows[0]["logits_match"]


def test_the_lookup_bench_times_both_paths_and_finds_every_prompt(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tutti.bench.lookup", "--tokens", "512,1024", "--repeat", "3",
                        "--dir", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()[1:]]
    assert len(rows) == 8
    for row in rows:
        assert row[-1] == row[0]  # the hit is the whole stored prompt, in-process and through the socket
    assert {" ".join(row[1:-3]) for row in rows} == {"in-process", "in-process lease", "socket", "socket lease"}
