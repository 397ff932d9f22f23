# SPDX-License-Identifier: Apache-2.0
"""What a lookup costs an engine's scheduler: in the process that owns the pool, and from
another process through the owner's lookup socket (tensor/pipeline parallelism: one per rank).

    python -m tutti.bench.lookup --tokens 1024,32768,131072 --repeat 200 [--ranks 4]

A runtime in a child process stores one prompt of each length (host memory, a pool under a
temporary directory, or --dir) and serves lookups on a socket; this process times lookups and
leases of each prompt in-process (its own runtime, the same prompts stored) and through a
LookupClient, and prints the median and p99 per call. With --ranks N, N such processes stand
for the ranks of a tensor-parallel engine, and the vLLM connector's lease over all of them is
timed asking them at once and one after another. Needs numpy, nothing else.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from .. import KvLayout, LookupClient, Runtime

LAYERS, BLOCK, HEADS, DIM, CHUNK = 2, 16, 1, 64, 256
BLOCKS = 64


def _open(pool: str, socket_path: str = "") -> Runtime:
    kv = np.zeros((LAYERS, 2, BLOCKS, BLOCK, HEADS, DIM), dtype=np.float16)
    rt = Runtime(pool=pool, capacity="256M", chunk_tokens=CHUNK, staging="16M",
                 lookup_socket=socket_path or None)
    rt.register_kv(KvLayout.paged(LAYERS, BLOCKS, BLOCK, HEADS, DIM, 2, k=[kv[i, 0] for i in range(LAYERS)],
                                  v=[kv[i, 1] for i in range(LAYERS)]))
    rt._kv = kv  # lives as long as the runtime
    return rt


def _prompt(n: int) -> np.ndarray:
    return np.random.default_rng(n).integers(1, 100_000, n, dtype=np.int32)


def _store(rt: Runtime, lengths) -> None:
    """Stores the prompts' chunks; the KV's bytes do not matter to a lookup, so every chunk
    reuses the same few blocks."""
    for n in lengths:
        tokens = _prompt(n)
        with rt.batch("store") as b:
            b.add(tokens, (np.arange(-(-n // BLOCK)) % BLOCKS).astype(np.int32))
            b.submit()
            b.wait()


def _serve(pool: str, socket_path: str, lengths) -> None:
    rt = _open(pool, socket_path)
    _store(rt, lengths)
    print("ready", flush=True)
    sys.stdin.read()
    rt.close()


def _time(f, repeat: int):
    f()  # warm
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        samples.append(time.perf_counter() - t0)
    samples.sort()
    return samples[len(samples) // 2] * 1e6, samples[min(len(samples) - 1, int(0.99 * len(samples)))] * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tutti.bench.lookup", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="1024,32768,131072", help="prompt lengths, comma-separated")
    ap.add_argument("--repeat", type=int, default=200, help="timed calls per row")
    ap.add_argument("--dir", default=None, help="where the pools and the socket go (default: a temporary directory)")
    ap.add_argument("--ranks", type=int, default=1, help="serving processes, as the ranks of one engine (default 1)")
    ap.add_argument("--serve", nargs=2, metavar=("POOL", "SOCKET"), help=argparse.SUPPRESS)  # the child
    a = ap.parse_args(argv)
    lengths = [int(x) for x in a.tokens.split(",")]
    if a.serve:
        _serve(a.serve[0], a.serve[1], lengths)
        return 0
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        socks = [os.path.join(d, f"lookup{r}.sock") for r in range(max(1, a.ranks))]
        sock = socks[0]
        children = [subprocess.Popen([sys.executable, "-m", "tutti.bench.lookup", "--tokens", a.tokens, "--serve",
                                      os.path.join(d, f"served{r}.pool"), s], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True) for r, s in enumerate(socks)]
        try:
            for child in children:
                if child.stdout.readline().strip() != "ready":
                    raise RuntimeError("a serving process did not come up")
            rt = _open(os.path.join(d, "local.pool"))
            _store(rt, lengths)
            client = LookupClient(sock)
            ranks = []
            if len(socks) > 1:
                from ..vllm.connector import _Ranks  # the connector's own fan-out
                ranks = [(f"{len(socks)} ranks at once", _Ranks(socks, 5000, parallel=True)),
                         (f"{len(socks)} ranks in turn", _Ranks(socks, 5000))]
            print(f"{'tokens':>8} {'path':<20} {'median us':>10} {'p99 us':>10}  hit")
            for n in lengths:
                tokens = _prompt(n)
                rows = [("in-process", lambda: rt.lookup(tokens), rt.lookup(tokens)),
                        ("in-process lease", lambda: rt.lookup_lease(tokens).close(), rt.lookup(tokens)),
                        ("socket", lambda: client.lookup(tokens), client.lookup(tokens)),
                        ("socket lease", lambda: client.release(client.lookup_lease(tokens)[1]), client.lookup(tokens))]
                for name, r in ranks:
                    probe = r.lookup_lease(tokens, b"", 0)
                    rows.append((name, lambda r=r: r.lookup_lease(tokens, b"", 0).close(), probe.tokens))
                    probe.close()
                for name, f, hit in rows:
                    med, p99 = _time(f, a.repeat)
                    print(f"{n:>8} {name:<20} {med:>10.1f} {p99:>10.1f}  {hit}")
            for _, r in ranks:
                r.close()
            client.close()
            rt.close()
        finally:
            for child in children:
                child.stdin.close()
                child.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
