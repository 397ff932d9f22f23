# SPDX-License-Identifier: Apache-2.0
"""Long-document QA: many documents, each asked about again later, tutti against recompute.

    python -m tutti.bench.docqa --model llama3.2-1b --docs 50x10240,16x65536 \\
        --source zram=/mnt/z/docqa.pool --out docqa.jsonl

A warm-up round prefills every document once and stores its KV in the pool. The query round
then asks about each document again: its tokens plus a short new question. Requests run one
after another, as on one serving GPU:
  recompute   each query prefills its whole prompt
  tutti       each query loads the document's cached chunks layer by layer and computes the
              rest; the next query's load is submitted as soon as this one's forward is queued,
              so it runs while this one computes
The engine's KV cache holds two prompts (the running one and the next), far less than the
documents' KV, and there is no DRAM tier: every document comes back from the pool.
Per mode: mean and p99 time to first token (from when the request becomes the running one to
its first token on the host) and the wall time of the query round; before each round, one
untimed query per document length (kernels pick their plans per shape). Every tutti query's
logits must equal, bit for bit, those of the same query over the document's KV computed in
HBM (the loaded KV are the bytes that were computed); they are also compared with the
recompute's (`logits_match`: the same greedy token and cosine >= 0.995; with random weights
and bf16, a different attention split can flip a near-tie).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .. import Runtime
from ..model_shapes import MODEL_SHAPES
from .ttft import (BLOCK_TOKENS, CHUNK_TOKENS, MATCH_COSINE, Model, drop_caches, import_engine, log, percentile,
                   run_config)

torch = PrefixLoad = store = None  # imported by main()


def parse_docs(spec: str):
    docs = []
    for part in spec.split(","):
        count, _, tokens = part.partition("x")
        if not count.isdigit() or not tokens.isdigit() or int(count) < 1 or int(tokens) < CHUNK_TOKENS:
            raise ValueError(f"--docs {part!r}: COUNTxTOKENS with TOKENS >= {CHUNK_TOKENS}")
        docs += [int(tokens)] * int(count)
    return docs


class DocQa:
    def __init__(self, a):
        self.a = a
        self.cuda = a.device == "cuda"
        shape = MODEL_SHAPES[a.model]
        self.model = Model(a, max(a.docs) + a.question)
        self.layers = shape["num_hidden_layers"]
        gen = torch.Generator().manual_seed(a.seed + 7)
        vocab = shape["vocab_size"]
        self.docs = [torch.randint(0, vocab, (n,), generator=gen, dtype=torch.int32) for n in a.docs]
        self.prompts = [torch.cat([d, torch.randint(0, vocab, (a.question,), generator=gen, dtype=torch.int32)])
                        for d in self.docs]
        longest = max(p.shape[0] for p in self.prompts)
        per = (longest + BLOCK_TOKENS - 1) // BLOCK_TOKENS
        self.kv = self.model.paged_kv(2 * per)
        self.tables = [torch.arange(per, dtype=torch.int32), torch.arange(per, 2 * per, dtype=torch.int32)]
        self.kv_bytes = sum(a.docs) * 2 * shape["num_key_value_heads"] * shape["head_dim"] * \
            self.kv.kv[0].element_size() * self.layers

    def sync(self):
        self.model.sync()

    def forward(self, tokens, prefix, table, wait=None):
        """Queues the prefill; returns the last token's logits (not waited for)."""
        return self.model.forward(self.kv, tokens, prefix, table, wait)[0]

    def runtime(self, path: str, backend: str) -> Runtime:
        rt = Runtime(pool=path, capacity=max(int(self.kv_bytes * 1.15), 256 << 20), chunk_tokens=CHUNK_TOKENS,
                     backend=backend)
        rt.register_kv(self.kv.layout())
        return rt

    def warm_up(self, rt: Runtime) -> float:
        t0 = time.perf_counter()
        for i, doc in enumerate(self.docs):
            table = self.tables[i % 2]
            self.forward(doc, 0, table).argmax().item()
            store(rt, doc, table)
            if (i + 1) % 10 == 0 or i + 1 == len(self.docs):
                log(f"  warm-up: {i + 1}/{len(self.docs)} documents computed and stored")
        return time.perf_counter() - t0

    def warm_queries(self):
        """One document index per distinct document length."""
        seen = {}
        for i, n in enumerate(self.a.docs):
            seen.setdefault(n, i)
        return sorted(seen.values())

    def recompute_round(self):
        ttfts, logits = [], []
        for i in self.warm_queries():
            self.forward(self.prompts[i], 0, self.tables[i % 2]).argmax().item()
        self.sync()
        t0 = time.perf_counter()
        for i, prompt in enumerate(self.prompts):
            s = time.perf_counter()
            out = self.forward(prompt, 0, self.tables[i % 2])
            out.argmax().item()
            ttfts.append(time.perf_counter() - s)
            logits.append(out)
        return ttfts, time.perf_counter() - t0, logits

    def tutti_round(self, rt: Runtime):
        stream = torch.cuda.current_stream() if self.cuda else None
        ttfts, logits, loaded = [], [], 0

        def start(i):
            return PrefixLoad(rt, self.prompts[i], self.tables[i % 2], stream=stream)

        for i in self.warm_queries():
            with start(i) as load:
                self.forward(self.prompts[i], load.tokens, self.tables[i % 2], wait=load.wait).argmax().item()
                load.finish()
        drop_caches()
        self.sync()
        t0 = time.perf_counter()
        load = start(0)
        for i, prompt in enumerate(self.prompts):
            s = time.perf_counter()
            out = self.forward(prompt, load.tokens, self.tables[i % 2], wait=load.wait)
            nxt = start(i + 1) if i + 1 < len(self.prompts) else None  # runs while this one computes
            out.argmax().item()
            ttfts.append(time.perf_counter() - s)
            got = load.finish()
            if got != load.tokens:
                raise RuntimeError(f"document {i}: {got} of {load.tokens} cached tokens arrived")
            loaded += load.tokens
            logits.append(out)
            load = nxt
        return ttfts, time.perf_counter() - t0, logits, loaded

    def floor_equal(self, logits, rt: Runtime) -> int:
        """How many tutti queries gave the logits of the same query over KV computed in HBM."""
        equal = 0
        for i, prompt in enumerate(self.prompts):
            hit = rt.lookup(prompt)
            self.forward(self.docs[i], 0, self.tables[i % 2])  # the document's KV, computed here
            floor = self.forward(prompt, hit, self.tables[i % 2])
            equal += bool(torch.equal(floor, logits[i]))
        return equal


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tutti.bench.docqa", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--model", default="llama3.2-1b", choices=sorted(MODEL_SHAPES))
    ap.add_argument("--docs", default="50x10240,16x65536", help="COUNTxTOKENS[,...] (default 50x10240,16x65536)")
    ap.add_argument("--question", type=int, default=64, help="tokens of each new question (default 64)")
    ap.add_argument("--source", required=True, metavar="NAME=PATH[@BACKEND]",
                    help="the pool: NAME (zram, disk or dram) labels the rows; BACKEND (default posix) loads it")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engine", default="hf", choices=["hf", "reference"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--out", default="docqa.jsonl", help="JSON lines, appended")
    a = ap.parse_args(argv)
    try:
        a.docs = parse_docs(a.docs)
    except ValueError as e:
        ap.error(str(e))
    name, _, rest = a.source.partition("=")
    path, _, backend = rest.partition("@")
    if name not in ("zram", "disk", "dram") or not path:
        ap.error(f"--source {a.source!r}: NAME=PATH[@BACKEND] with NAME zram, disk or dram")
    if a.question < 1:
        ap.error("--question: at least 1 token")
    modules = import_engine(ap, a, "docqa")
    if modules is None:
        return 77
    globals().update({name: modules[name] for name in ("torch", "PrefixLoad", "store")})
    b = DocQa(a)
    log(f"{a.model}: {len(a.docs)} documents, {sum(a.docs)} tokens, {b.kv_bytes / 2**30:.1f} GiB of KV; "
        f"the engine's cache holds 2 prompts ({2 * b.tables[0].shape[0] * BLOCK_TOKENS} tokens)")
    if os.path.exists(path):
        os.remove(path)
    rt = b.runtime(path, backend or "posix")
    try:
        b.forward(b.docs[0][:1024], 0, b.tables[0]).argmax().item()  # warm-up of the kernels
        warm_s = b.warm_up(rt)
        log(f"  warm-up round: {warm_s:.1f} s")
        rec, rec_wall, rec_logits = b.recompute_round()
        tut, tut_wall, tut_logits, loaded = b.tutti_round(rt)
        equal = b.floor_equal(tut_logits, rt)
    finally:
        rt.close()
        os.remove(path)
    matches, worst = 0, 1.0
    for x, y in zip(tut_logits, rec_logits):
        cos = torch.nn.functional.cosine_similarity(x.float(), y.float(), dim=0).item()
        worst = min(worst, cos)
        matches += bool(x.argmax().item() == y.argmax().item() and cos >= MATCH_COSINE)
    common = dict(model=a.model, docs=len(a.docs), doc_tokens=sorted(set(a.docs)), total_tokens=sum(a.docs),
                  question=a.question, kv_gib=round(b.kv_bytes / 2**30, 2), source=name, backend=backend or "posix",
                  engine=a.engine, gpu=torch.cuda.get_device_name() if b.cuda else "none (cpu)", config=run_config())
    rows = [dict(mode="recompute", ttft_mean_s=sum(rec) / len(rec), ttft_p99_s=percentile(rec, 99),
                 wall_s=rec_wall, ttft_s=[round(x, 4) for x in rec]),
            dict(mode="tutti", ttft_mean_s=sum(tut) / len(tut), ttft_p99_s=percentile(tut, 99), wall_s=tut_wall,
                 ttft_s=[round(x, 4) for x in tut], loaded_tokens=loaded,
                 loaded_gib=round(b.kv_bytes * loaded / sum(a.docs) / 2**30, 2),
                 logits_equal_floor=f"{equal}/{len(tut)}", logits_match=f"{matches}/{len(tut)}",
                 worst_cosine=round(worst, 6))]
    with open(a.out, "a") as f:
        for r in rows:
            f.write(json.dumps({**common, **r}) + "\n")
    print(f"{a.model}, {len(a.docs)} documents ({'+'.join(f'{a.docs.count(n)}x{n}' for n in sorted(set(a.docs)))} "
          f"tokens, {b.kv_bytes / 2**30:.1f} GiB KV) from {name} ({backend or 'posix'}):")
    print(f"{'mode':>10} {'TTFT mean':>10} {'TTFT p99':>10} {'round wall':>11}")
    for r in rows:
        print(f"{r['mode']:>10} {r['ttft_mean_s'] * 1e3:8.1f}ms {r['ttft_p99_s'] * 1e3:8.1f}ms {r['wall_s']:10.2f}s")
    print(f"logits: {equal}/{len(tut)} queries equal those over KV computed in HBM; {matches}/{len(tut)} match "
          f"the recompute (worst cosine {worst:.4f})")
    return 0 if equal == len(tut) else 1


if __name__ == "__main__":
    sys.exit(main())
