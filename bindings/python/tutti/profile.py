# SPDX-License-Identifier: Apache-2.0
"""Measures this machine for the load-or-recompute policy and saves a profile per source.

    python -m tutti.profile --model llama3-8b --tokens 32768 \\
        --source zram=/mnt/z/profile.pool@posix --source disk=/var/tmp/profile.pool@uring --out profiles/

For the model (transformers' Llama with random weights, as tutti.bench.ttft builds it) it times
whole forward passes at several shapes (a whole prompt, a head, suffixes over cached prefixes)
and fits the per-layer compute model of tutti.policy.Profile; for each source it stores a
prompt and measures its load bandwidth (every layer at once, the best backend given) and the
first-byte latency (a one-chunk load). Each source's profile goes to OUT/<model>-<source>.json:

    from tutti.policy import Profile, decide
    d = decide(Profile.load("profiles/llama3-8b-zram.json"), tokens=32768, prefix=28672, chunk_tokens=256)

`python -m tutti.policy --profile FILE --tokens N --prefix P` prints a decision and its reason;
`python -m tutti.bench.ttft --profile OUT` measures what the decisions give.
"""
import argparse
import os
import sys
import tempfile

from .bench import ttft
from .model_shapes import MODEL_SHAPES
from .policy import Profile


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tutti.profile", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--model", default="llama3-8b", choices=sorted(MODEL_SHAPES))
    ap.add_argument("--tokens", type=int, default=32768, help="the prompt length measured (default 32768)")
    ap.add_argument("--source", action="append", default=[], metavar="NAME=PATH[@BACKENDS]", required=True,
                    help="a pool to measure (as tutti.bench.ttft takes it); repeat")
    ap.add_argument("--repeat", type=int, default=2, help="runs per shape; the lower median counts (default 2)")
    ap.add_argument("--engine", default="hf", choices=["hf", "reference"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--out", required=True, metavar="DIR", help="where the profiles go")
    a = ap.parse_args(argv)
    chunk = ttft.CHUNK_TOKENS
    prefixes = sorted({p // chunk * chunk for p in (a.tokens // 8, a.tokens // 2, 7 * a.tokens // 8)} - {0})
    prefixes = [p for p in prefixes if p < a.tokens]
    if not prefixes:
        ap.error(f"--tokens {a.tokens}: at least {2 * chunk}, so that a prefix of whole chunks is cached")
    with tempfile.TemporaryDirectory() as tmp:
        args = ["--model", a.model, "--tokens", str(a.tokens), "--prefix", ",".join(map(str, prefixes)),
                "--modes", "recompute,floor,load_all", "--repeat", str(a.repeat), "--engine", a.engine,
                "--device", a.device, "--save-profile", a.out, "--out", os.path.join(tmp, "rows.jsonl")]
        for s in a.source:
            args += ["--source", s]
        rc = ttft.main(args)
    if rc:
        return rc
    for s in a.source:
        path = os.path.join(a.out, f"{a.model}-{s.partition('=')[0]}.json")
        p = Profile.load(path)
        print(f"{path}: {p.layers} layers, per layer {p.fixed_s * 1e3:.3f} ms + {p.token_s * 1e6:.3f} us/token + "
              f"{p.pair_s * 1e9:.4f} ns/pair; {p.load_bytes_per_s / 1e9:.2f} GB/s ({p.backend}), "
              f"first chunk {p.load_latency_s * 1e3:.2f} ms; {len(p.samples)} measured shapes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
