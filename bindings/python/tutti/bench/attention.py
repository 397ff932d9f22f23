# SPDX-License-Identifier: Apache-2.0
"""Which kernel attends fastest over a cached prefix on this GPU: one layer's attention of the
N - P new tokens of an N-token prompt over all N keys, per method of tutti.prefix_attention,
next to the square causal attention a full recompute runs (`square`).

    python -m tutti.bench.attention --model llama3-8b --tokens 32768 --prefix 4096,16384,28672

Each method is checked against float32 on a sample of query rows (first, last and spread), and
the CUDA kernels it launched are named. Prints a table; --out appends JSON lines.
"""
from __future__ import annotations

import argparse
import json
import sys

from ..model_shapes import MODEL_SHAPES
from .ttft import add_prompt_args, prefixes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tutti.bench.attention", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    add_prompt_args(ap)
    ap.add_argument("--iters", type=int, default=5, help="timed calls per method; the median is reported")
    ap.add_argument("--out", default=None, help="append one JSON line per (prefix, method)")
    a = ap.parse_args(argv)
    n = a.tokens
    cached = prefixes(a)
    if any(not 0 < p < n for p in cached):
        ap.error(f"every prefix in (0, {n})")
    try:
        import torch
        from .. import prefix_attention as pa
    except ImportError as e:
        print(f"attention: {e}: this benchmark needs torch", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("attention: no CUDA device for torch", file=sys.stderr)
        return 77
    shape = MODEL_SHAPES[a.model]
    heads, kv_heads, d = shape["num_attention_heads"], shape["num_key_value_heads"], shape["head_dim"]
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(*s):
        return torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=gen)

    # The layouts transformers hands the attention: [b, q, heads, d] and [k, kv_heads, d] transposed.
    q_all = rand(1, n, heads, d).transpose(1, 2)
    key, value = rand(n, kv_heads, d).transpose(0, 1)[None], rand(n, kv_heads, d).transpose(0, 1)[None]

    def timed(fn):
        for _ in range(2):
            fn()
        times = []
        for _ in range(a.iters):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        return sorted(times)[len(times) // 2]

    def kernels(fn):
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        rows = [e for e in prof.key_averages() if getattr(e, "device_time_total", 0) > 0]
        rows.sort(key=lambda e: -e.device_time_total)
        return [r.key[:60] for r in rows[:3]]

    rows = []
    pairs = n * (n + 1) / 2
    ms = timed(lambda: torch.nn.functional.scaled_dot_product_attention(q_all, key, value, is_causal=True,
                                                                       enable_gqa=True))
    rows.append(dict(prefix=0, method="square", ms=ms, tflops=4 * heads * d * pairs / ms / 1e9, ok=True,
                     max_err=0.0, kernels=kernels(lambda: torch.nn.functional.scaled_dot_product_attention(
                         q_all, key, value, is_causal=True, enable_gqa=True))))
    for p in cached:
        q = q_all[:, :, p:]
        m = n - p
        pairs = m * p + m * (m + 1) / 2
        sample = torch.unique(torch.linspace(0, m - 1, 33, device="cuda").long())
        ref = pa.reference_rows(q, key, value, sample)
        for method in pa.METHODS:
            def run():
                return pa.bottom_right(q, key, value, method=method)
            try:
                out = run()
                err = (out[:, :, sample].float() - ref).abs().max().item()
                ok = err <= 1e-2 + 2e-2 * ref.abs().max().item()
                ms = timed(run)
                names = kernels(run)
            except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
                rows.append(dict(prefix=p, method=method, ms=None, tflops=None, ok=False, max_err=None,
                                 kernels=[f"failed: {str(e).splitlines()[0][:80]}"]))
                continue
            rows.append(dict(prefix=p, method=method, ms=ms, tflops=4 * heads * d * pairs / ms / 1e9, ok=ok,
                             max_err=err, kernels=names))
    print(f"{a.model}: {heads} heads, {kv_heads} KV heads, dim {d}; N={n}; {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}")
    print(f"{'P':>7} {'method':>12} {'ms':>8} {'TFLOP/s':>8} {'check':>6}  kernels")
    for r in rows:
        ms = f"{r['ms']:8.2f}" if r["ms"] is not None else f"{'-':>8}"
        tf = f"{r['tflops']:8.0f}" if r["tflops"] is not None else f"{'-':>8}"
        ok = "ok" if r["ok"] else "WRONG" if r["max_err"] is not None else "-"
        print(f"{r['prefix']:>7} {r['method']:>12} {ms} {tf} {ok:>6}  {'; '.join(r['kernels'])}")
    if a.out:
        with open(a.out, "a") as f:
            for r in rows:
                f.write(json.dumps(dict(model=a.model, tokens=n, gpu=torch.cuda.get_device_name(),
                                        torch=torch.__version__, **r)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
