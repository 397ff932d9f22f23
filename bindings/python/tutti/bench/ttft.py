# SPDX-License-Identifier: Apache-2.0
"""Time to first token on a Hugging Face Llama (random weights) with its prefix KV from tutti.

    python -m tutti.bench.ttft --model llama3-8b --tokens 32768 --prefix 8192,16384,28672 \\
        --source zram=/mnt/z/ttft.pool --source disk=/var/tmp/ttft.pool --source dram=/dev/shm/ttft.pool \\
        --out ttft.jsonl

A `remote=PATH` source is the shared tier (--remote redis://...): the prompt is stored on a
runtime of its own (PATH.writer) and written through to the cluster; the rows load it into a
runtime whose pool (PATH) is empty, every chunk from the cluster (no promotion): a first hit on
another machine.

For one prompt of N tokens whose first P are cached, each mode prefills and takes the last
token's logits; the time is from the lookup to the logits on the host:
  recompute   the whole prompt, nothing loaded
  floor       the prefix KV is in HBM already: the compute-only floor of every load mode
  layerwise   tutti loads layer by layer while the model computes (one row per backend)
  load_all    tutti loads every layer, then the model computes
  per_block   layer-wise, with the per-block baseline's I/O (one read per block and layer)
  hybrid      tutti.policy decides how much of the prefix to recompute while the rest loads
  store       layer-wise, while the KV of another prompt of N tokens is being stored (submitted
              when the request starts; `store_s`: when that store was done, after the clock stopped)
  floor_spin  (asked for by name only) the floor while 1 and then 4 one-thread kernels spin on
              streams of their own (backend spin1, spin4): what an I/O kernel that stays resident
              while its reads are in flight, as gpu-uring's does, costs the model's kernels
Before every load the prefix blocks are zeroed, and each row's logits are compared with the
full recompute (`logits_match`: the same greedy token and cosine >= 0.995) and with the floor's
(`logits_equal_floor`: bit for bit: the loaded KV are the bytes that were computed).

One JSON line per (model, tokens, prefix, source, mode, backend) is appended to --out; rows
already there are skipped, so a sweep split across calls resumes where it stopped.
`--engine reference --device cpu` runs the same rows with tutti.reference_llama on the CPU: CI
checks the harness so (its times mean nothing).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Dict, List, Optional

from .. import Runtime
from ..model_shapes import MODEL_SHAPES
from ..policy import Profile, decide

torch = hf = PagedKv = PrefixLoad = store = None  # imported by main(): --help needs neither torch nor transformers

BLOCK_TOKENS = 16
CHUNK_TOKENS = 256
BACKENDS = {"zram": ["gpu-uring", "uring", "posix"], "disk": ["uring", "gpu-uring", "posix"], "dram": ["dram"],
            "remote": ["posix"]}
# bf16 over a random-weight model: a suffix computed over a prefix and the whole prompt at once
# take different attention kernels, and their last-token logits differ by about this much.
MATCH_COSINE = 0.995
MODES = ["recompute", "floor", "load_all", "layerwise", "per_block", "hybrid", "store"]
DIAGNOSTIC_MODES = ["floor_spin"]  # run only when --modes names them
SPIN_BLOCKS = (1, 4)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def drop_caches() -> None:
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass  # not root: O_DIRECT pools do not go through the page cache anyway


def run_config() -> dict:
    """The runtime options a row ran with that change its time (tutti.h; TUTTI_* variables),
    and the source revision when the caller names it (TUTTI_REV, set by tools/device-run)."""
    config = {k: os.environ.get("TUTTI_" + k.upper(), default)
              for k, default in (("stream_wait", "host"), ("device_staging", "64M"), ("verify", "on"),
                                 ("threads", "auto"), ("load_priority", "normal"), ("store_slack", "0"))}
    config["cpus"] = len(os.sched_getaffinity(0))  # what threads=auto is resolved from
    if os.environ.get("TUTTI_REV"):
        config["rev"] = os.environ["TUTTI_REV"]
    return config


def percentile(xs: List[float], p: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def add_prompt_args(ap: argparse.ArgumentParser, model: str = "llama3-8b") -> None:
    """The benchmarks' prompt: --model, --tokens N and --prefix (see prefixes())."""
    ap.add_argument("--model", default=model, choices=sorted(MODEL_SHAPES))
    ap.add_argument("--tokens", type=int, default=32768, help="prompt length N (default 32768)")
    ap.add_argument("--prefix", default="", help="comma-separated cached prefixes P (default N/8, N/2, 7N/8)")


def prefixes(a) -> List[int]:
    return sorted(int(x) for x in a.prefix.split(",")) if a.prefix else [a.tokens // 8, a.tokens // 2, 7 * a.tokens // 8]


def import_engine(ap: argparse.ArgumentParser, a, prog: str) -> Optional[dict]:
    """Imports torch, tutti.layerwise and (--engine hf) tutti.hf for the benchmarks and returns
    them by name; None, having said why, where they or a CUDA device for torch are missing (the
    caller exits 77: skipped)."""
    if a.device == "cpu" and a.engine == "hf":
        ap.error("--device cpu needs --engine reference")
    global torch, hf, PagedKv, PrefixLoad, store
    try:
        import torch
        from ..layerwise import PagedKv, PrefixLoad, store
        if a.engine == "hf":
            from .. import hf
    except ImportError as e:
        log(f"{prog}: {e}: this benchmark needs torch (and, for --engine hf, transformers)")
        return None
    if a.device == "cuda" and not torch.cuda.is_available():
        log(f"{prog}: no CUDA device for torch: run it on a GPU, or with --engine reference --device cpu")
        return None
    return dict(torch=torch, hf=hf, PagedKv=PagedKv, PrefixLoad=PrefixLoad, store=store)


class Model:
    """The model a benchmark prefills over a PagedKv: transformers' LlamaForCausalLM with random
    weights (--engine hf), or tutti.reference_llama (--engine reference: the same protocol and
    rows, on the CPU too, so CI runs the benchmarks at a tiny size)."""

    def __init__(self, a, max_tokens: int):
        self.shape = MODEL_SHAPES[a.model]
        self.device = a.device
        self.hf = a.engine == "hf"
        if self.hf:
            self.llama = hf.build(a.model, seed=a.seed, max_tokens=max(max_tokens, 8192))
            self.dtype = torch.bfloat16
        else:
            from ..reference_llama import LlamaShape, ReferenceLlama
            s = self.shape
            self.llama = ReferenceLlama(LlamaShape(layers=s["num_hidden_layers"], hidden=s["hidden_size"],
                                                   heads=s["num_attention_heads"], kv_heads=s["num_key_value_heads"],
                                                   head_dim=s["head_dim"], intermediate=s["intermediate_size"],
                                                   vocab=s["vocab_size"]), seed=a.seed, device=a.device)
            self.dtype = torch.float32

    def paged_kv(self, blocks: int):
        s = self.shape
        return PagedKv(s["num_hidden_layers"], blocks, BLOCK_TOKENS, s["num_key_value_heads"], s["head_dim"],
                       self.dtype, self.device)

    def forward(self, kv, tokens, prefix, table, wait=None, events=False):
        """Queues the prefill of tokens[prefix:] over kv's cached prefix; returns the last
        token's logits (not waited for) and what measured the waits (a PagedCache's events)."""
        if not self.hf:
            return self.llama.prefill(tokens, kv, table, prefix=prefix, before_attention=wait)[-1], NoEvents()
        cache = hf.PagedCache(self.llama.config, kv, table, prefix=prefix, wait=wait, events=events)
        return hf.prefill(self.llama, tokens, cache), cache

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()


class NoEvents:
    """What the reference engine has instead of a PagedCache's wait events: none."""
    events = ()

    def bubbles_ms(self) -> list:
        return []


class Bench:
    def __init__(self, args):
        self.a = args
        self.cuda = args.device == "cuda"
        shape = MODEL_SHAPES[args.model]
        self.model = Model(args, args.tokens)
        self.layers, self.kv_heads, self.head_dim = (shape["num_hidden_layers"], shape["num_key_value_heads"],
                                                     shape["head_dim"])
        self.n = args.tokens
        gen = torch.Generator().manual_seed(args.seed + 1)
        vocab = shape["vocab_size"]
        self.tokens = torch.randint(0, vocab, (self.n,), generator=gen, dtype=torch.int32)
        self.other = torch.randint(0, vocab, (self.n,), generator=gen, dtype=torch.int32)  # the stored prompt
        nb = (self.n + BLOCK_TOKENS - 1) // BLOCK_TOKENS
        self.kv = self.model.paged_kv(2 * nb)
        self.table = torch.arange(nb, dtype=torch.int32)
        self.table_other = torch.arange(nb, 2 * nb, dtype=torch.int32)
        self.bytes_per_token_layer = 2 * self.kv_heads * self.head_dim * self.kv.kv[0].element_size()
        self.done = set()
        self.rows: List[dict] = []
        if os.path.exists(args.out):
            with open(args.out) as f:
                for line in f:
                    r = json.loads(line)
                    self.rows.append(r)
                    self.done.add(self.key(r))
        self.ref: Optional[torch.Tensor] = None
        self.floor: Dict[int, torch.Tensor] = {}
        self.profile: Optional[Profile] = None
        self.spin_hz: Optional[float] = None  # floor_spin: GPU clock cycles per second, measured once

    @staticmethod
    def key(r: dict):
        return (r["model"], r["tokens"], r["prefix"], r["source"], r["mode"], r.get("backend", "-"), r.get("variant", ""))

    def emit(self, row: dict) -> None:
        row = dict(model=self.a.model, tokens=self.n, **row)
        if self.a.variant:
            row["variant"] = self.a.variant
        row["gpu"] = torch.cuda.get_device_name() if self.cuda else "none (cpu)"
        row["engine"] = self.a.engine
        row["config"] = run_config()
        with open(self.a.out, "a") as f:
            f.write(json.dumps(row) + "\n")
        self.rows.append(row)
        self.done.add(self.key(row))
        log(f"  {row['mode']:>9} {row['source']:>5} {row.get('backend', '-'):>9} P={row['prefix']:>6}: "
            f"TTFT {row['ttft_s'] * 1e3:8.1f} ms  bubble {row['bubble_ms_mean']:6.2f}/{row['bubble_ms_p99']:6.2f} ms  "
            f"{row['load_gbps']:6.2f} GB/s  cpu {row['cpu_s']:6.2f} s  match={row['logits_match']}"
            f" floor-equal={row.get('logits_equal_floor')}")

    def check(self, logits: torch.Tensor, prefix: int) -> dict:
        ref = self.ref
        cos = torch.nn.functional.cosine_similarity(logits, ref, dim=0).item()
        out = dict(logits_match=bool(logits.argmax().item() == ref.argmax().item() and cos >= MATCH_COSINE),
                   logits_cosine=round(cos, 6), logits_max_diff=float((logits - ref).abs().max()))
        if prefix in self.floor:
            out["logits_equal_floor"] = bool(torch.equal(logits, self.floor[prefix]))
        return out

    def timed(self, run):
        """run(mark) -> (logits, extra), calling mark() where the request starts (after any
        set-up); returns the median of --repeat runs: logits, extra, seconds, CPU seconds and
        every run's seconds. The clock stops when the first token is known on the host: work
        that goes on after it (extra["after"], e.g. another prompt's store) is waited for
        untimed, and may put its own measurements into extra."""
        samples, results = [], []
        for _ in range(self.a.repeat):
            self.sync()
            start = {}

            def mark():
                start["t"], start["cpu"] = time.perf_counter(), time.process_time()

            mark()
            logits, extra = run(mark)
            logits.argmax().item()  # the first token is known on the host
            t1, c1 = time.perf_counter(), time.process_time()
            after = extra.pop("after", None) if isinstance(extra, dict) else None
            if after is not None:
                after(extra)
            samples.append(t1 - start["t"])
            results.append((logits, extra, c1 - start["cpu"]))
        i = sorted(range(len(samples)), key=samples.__getitem__)[(len(samples) - 1) // 2]  # the lower median
        logits, extra, cpu = results[i]
        return logits, extra, samples[i], cpu, samples

    # ---- compute only ------------------------------------------------------------------------

    def sync(self) -> None:
        self.model.sync()

    def forward(self, tokens, prefix, table, wait=None, events=False):
        return self.model.forward(self.kv, tokens, prefix, table, wait, events)

    def warm(self, tokens, prefix) -> None:
        """With one run per row, one untimed pass at a shape first: the first pass at a shape
        also builds cuDNN's plans for it (11.1 s against 10.1 s for the next, at 96K tokens over
        a 32K prefix of the 8B shape), which a lower median of two or more leaves out anyway."""
        if self.a.repeat < 2:
            self.forward(tokens, prefix, self.table)
            self.sync()

    def compute_rows(self) -> None:
        log(f"{self.a.model}, {self.n} tokens: warm-up, recompute, floors")
        self.forward(self.tokens[:2048], 0, self.table)
        self.warm(self.tokens, 0)
        logits, _, secs, cpu, samples = self.timed(lambda mark: self.forward(self.tokens, 0, self.table))
        self.ref = logits
        samples_fit = [(self.n, 0, secs)]
        if not self.done_row(0, "none", "recompute"):
            # the reference of every other row's check: nothing to check it against
            self.emit(dict(prefix=0, source="none", mode="recompute", backend="-", ttft_s=secs, ttft_samples=samples,
                           bubble_ms_mean=0.0, bubble_ms_p99=0.0, load_gbps=0.0, cpu_s=cpu, logits_match=None))
        # A head pass alone (no prefix), for the profile; it writes the same KV again.
        head = self.n // 4
        self.warm(self.tokens[:head], 0)
        _, _, hsecs, _, _ = self.timed(lambda mark: self.forward(self.tokens[:head], 0, self.table))
        samples_fit.append((head, 0, hsecs))
        for p in self.a.prefix:
            self.warm(self.tokens, p)
            logits, _, secs, cpu, samples = self.timed(lambda mark: self.forward(self.tokens, p, self.table))
            checked = self.check(logits, p)  # against the recompute (the floor is this row itself)
            self.floor[p] = logits
            samples_fit.append((self.n - p, p, secs))
            if not self.done_row(p, "hbm", "floor"):
                self.emit(dict(prefix=p, source="hbm", mode="floor", backend="-", ttft_s=secs, ttft_samples=samples,
                               bubble_ms_mean=0.0, bubble_ms_p99=0.0, load_gbps=0.0, cpu_s=cpu, **checked))
            if "floor_spin" in self.a.modes:
                self.spin_rows(p, secs)
        self.profile = Profile(model=self.a.model, layers=self.layers,
                               kv_bytes_per_token_layer=self.bytes_per_token_layer).fit(samples_fit)

    def spin_rows(self, p: int, floor_s: float) -> None:
        """The floor beside k resident one-thread kernels (torch.cuda._sleep) on side streams,
        each spinning for three floors: a block that holds an SM for the whole prefill, as
        gpu-uring's I/O kernel holds one while a layer's reads are in flight. A kernel that
        needs all of an SM's registers cannot share that SM with it."""
        if not self.cuda:
            log("floor_spin: CUDA only (skipped)")
            return
        if self.spin_hz is None:  # _sleep counts clock cycles: how many per second here
            torch.cuda._sleep(1000)  # loads the kernel, outside the timing
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            torch.cuda._sleep(50_000_000)
            e1.record()
            e1.synchronize()
            self.spin_hz = 50_000_000 / (e0.elapsed_time(e1) / 1000)
            self.spin_streams = [torch.cuda.Stream() for _ in range(max(SPIN_BLOCKS))]
        for k in SPIN_BLOCKS:
            if self.done_row(p, "hbm", "floor_spin", f"spin{k}"):
                continue

            def run(mark, k=k):
                for st in self.spin_streams[:k]:
                    with torch.cuda.stream(st):
                        torch.cuda._sleep(int(3 * floor_s * self.spin_hz))
                mark()
                return self.forward(self.tokens, p, self.table)

            logits, _, secs, cpu, samples = self.timed(run)
            self.emit(dict(prefix=p, source="hbm", mode="floor_spin", backend=f"spin{k}", ttft_s=secs,
                           ttft_samples=samples, bubble_ms_mean=0.0, bubble_ms_p99=0.0, load_gbps=0.0, cpu_s=cpu,
                           **self.check(logits, p)))

    def done_row(self, prefix, source, mode, backend="-") -> bool:
        return (self.a.model, self.n, prefix, source, mode, backend, self.a.variant) in self.done

    # ---- loads -------------------------------------------------------------------------------

    def runtime(self, path: str, backend: str, per_block: bool = False, remote: bool = False) -> Runtime:
        kv_bytes = self.n * self.bytes_per_token_layer * self.layers
        # Room for the prompt, and for the other prompts stored by the store rows (new keys each).
        room = 1.2 + ((1 + self.a.repeat) * max(map(len, self.a.backends.values())) if "store" in self.a.modes else 0)
        # gpu-uring stages a whole layer of the batch (tutti.h, option staging): room for the
        # prompt's layer and a stored prompt's, above the default 256M for long prompts. The
        # other backends go in waves through any staging; they get the same, for like rows.
        layer = self.n * self.bytes_per_token_layer
        staging = f"{max(256 << 20, 2 * layer + (64 << 20)) >> 20}M"
        if "TUTTI_STAGING" in os.environ:  # a row variant that sizes staging itself
            staging = None
        tier = dict(remote=self.a.remote, remote_promote=0, remote_connections=self.a.remote_connections,
                    remote_timeout_ms=5000) if remote else {}
        rt = Runtime(pool=path, capacity=max(int(kv_bytes * room), 256 << 20), chunk_tokens=CHUNK_TOKENS, backend=backend,
                     io_mode="per-block-baseline" if per_block else None, staging=staging, **tier)
        rt.register_kv(self.kv.layout())
        return rt

    def zero_prefix(self, prefix: int) -> None:
        for t in self.kv.kv:
            t[:, : prefix // BLOCK_TOKENS].zero_()

    def load_run(self, rt: Runtime, p: int, mode: str, head: int = 0, other: bool = False):
        stream = torch.cuda.current_stream() if self.cuda else None

        def run(mark):
            self.zero_prefix(p)
            drop_caches()
            self.sync()
            mark()
            t0 = time.perf_counter()
            storing = None
            if other:  # another prompt's KV, stored while this one loads
                storing = rt.batch("store")
                storing.add(self.other, self.table_other, salt=os.urandom(8))
                storing.submit()
            start = torch.cuda.Event(enable_timing=True) if self.cuda else None
            if start is not None:
                start.record()
            with PrefixLoad(rt, self.tokens, self.table, stream=stream, begin=head, end=p) as load:
                if load.tokens != p:
                    raise RuntimeError(f"the pool holds {load.tokens} of the prompt's tokens, not {p}")
                load_s = None
                if mode == "load_all":
                    got = load.finish()
                    load_s = time.perf_counter() - t0
                if head:
                    self.forward(self.tokens[:head], 0, self.table)
                logits, cache = self.forward(self.tokens, p, self.table, wait=None if mode == "load_all" else load.wait,
                                             events=True)
                if mode != "load_all":
                    last = cache.events[-1][1] if cache.events else None
                    got = load.finish()
            if got != p:
                raise RuntimeError(f"{got} of {p} prefix tokens arrived")
            self.sync()
            if load_s is None:  # when the GPU passed the last layer's wait: the load was done by then
                load_s = start.elapsed_time(last) / 1e3 if last is not None else time.perf_counter() - t0
            extra = dict(bubbles=cache.bubbles_ms(), load_s=load_s)
            if storing is not None:  # goes on past the first token: waited for after the clock stops
                def finish_store(out):
                    storing.wait()
                    out["store_s"] = time.perf_counter() - t0
                    storing.close()
                extra["after"] = finish_store
            return logits, extra

        logits, extra, secs, cpu, samples = self.timed(run)
        loaded = (p - head) * self.bytes_per_token_layer * self.layers
        b = extra["bubbles"]
        return dict(ttft_s=secs, ttft_samples=samples, bubble_ms_mean=sum(b) / len(b) if b else 0.0,
                    bubble_ms_p99=percentile(b, 99), bubbles_ms=[round(x, 3) for x in b],
                    load_s=extra["load_s"], load_gbps=loaded / extra["load_s"] / 1e9 if extra["load_s"] else 0.0,
                    cpu_s=cpu, **({"store_s": extra["store_s"]} if "store_s" in extra else {}), **self.check(logits, p))

    def store_prompt(self, source: str, path: str) -> None:
        """A fresh pool holding the prompt (the blocks hold its KV from the recompute); for the
        remote source, a writer's pool whose chunks are written through to the cluster, and an
        empty pool to load into."""
        remote = source == "remote"
        target = path + ".writer" if remote else path
        for f in {path, target}:
            if os.path.exists(f):
                os.remove(f)
        rt = self.runtime(target, self.a.backends[source][0], remote=remote)
        t0 = time.perf_counter()
        stored = store(rt, self.tokens, self.table)
        if remote:  # written through in the background: wait for every chunk
            chunks = stored // CHUNK_TOKENS
            while rt.stats()["remote_written_chunks"] < chunks and time.perf_counter() - t0 < 600:
                time.sleep(0.01)
        log(f"{source}: stored {stored} tokens in {time.perf_counter() - t0:.1f} s ({target})")
        rt.close()
        if remote:
            os.remove(target)

    def source_rows(self, source: str, path: str) -> None:
        backends = self.a.backends[source]
        log(f"{self.a.model}, {self.n} tokens from {source}: backends {', '.join(backends)}")
        bandwidth: Dict[str, float] = {}
        for backend in backends:
            rt = self.runtime(path, backend, remote=source == "remote")
            for p in self.a.prefix:
                for mode in ("load_all", "layerwise"):
                    if mode in self.a.modes and not self.done_row(p, source, mode, backend):
                        r = self.load_run(rt, p, mode)
                        self.emit(dict(prefix=p, source=source, mode=mode, backend=backend, **r))
            measured = [x["load_gbps"] for x in self.rows if self.key(x)[:2] == (self.a.model, self.n) and
                        (x["source"], x["mode"], x["backend"], x.get("variant", "")) ==
                        (source, "load_all", backend, self.a.variant)]
            if measured:  # this run's or an earlier call's
                bandwidth[backend] = max(measured) * 1e9
            if "store" in self.a.modes and source != "remote":
                p = self.a.prefix[-1]
                if not self.done_row(p, source, "store", backend):
                    self.emit(dict(prefix=p, source=source, mode="store", backend=backend,
                                   **self.load_run(rt, p, "layerwise", other=True)))
            rt.close()
        if "per_block" in self.a.modes and source not in ("dram", "remote"):
            backend = "uring"
            rt = self.runtime(path, backend, per_block=True)
            for p in self.a.prefix:
                if not self.done_row(p, source, "per_block", backend):
                    self.emit(dict(prefix=p, source=source, mode="per_block", backend=backend,
                                   **self.load_run(rt, p, "layerwise")))
            rt.close()
        prof = self.source_profile(source, path, bandwidth) if source != "remote" else None
        if "hybrid" in self.a.modes and prof is not None:
            backend = prof.backend or (max(bandwidth, key=bandwidth.get) if bandwidth else self.a.backends[source][0])
            rt = self.runtime(path, backend)
            for p in self.a.prefix:
                if self.done_row(p, source, "hybrid", backend):
                    continue
                d = decide(prof, self.n, p, CHUNK_TOKENS)
                if d.load == 0:  # the policy recomputes: that is the recompute row's time
                    logits, _, secs, cpu, samples = self.timed(lambda mark: self.forward(self.tokens, 0, self.table))
                    r = dict(ttft_s=secs, ttft_samples=samples, bubble_ms_mean=0.0, bubble_ms_p99=0.0, load_gbps=0.0,
                             cpu_s=cpu, **self.check(logits, -1))
                else:
                    r = self.load_run(rt, p, "layerwise", head=d.recompute)
                self.emit(dict(prefix=p, source=source, mode="hybrid", backend=backend, recompute_tokens=d.recompute,
                               load_tokens=d.load, predicted_s=d.predicted_s, decision=d.reason,
                               profile={k: v for k, v in prof.__dict__.items() if k != "samples"}, **r))
            rt.close()
        os.remove(path)

    def source_profile(self, source: str, path: str, bandwidth: Dict[str, float]) -> Optional[Profile]:
        """The profile the policy decides from for this source: --profile DIR's file for it, or
        this run's fit with the fastest backend's load bandwidth (saved to --save-profile DIR,
        with the first-byte latency of a one-chunk load measured here)."""
        name = f"{self.a.model}-{source}.json"
        if self.a.profile and os.path.exists(os.path.join(self.a.profile, name)):
            return Profile.load(os.path.join(self.a.profile, name))
        if self.profile is None or not bandwidth:
            return None
        backend = max(bandwidth, key=bandwidth.get)
        prof = Profile(**{**self.profile.__dict__, "source": source, "backend": backend,
                          "load_bytes_per_s": bandwidth[backend]})
        if self.a.save_profile:
            rt = self.runtime(path, backend)
            prof.load_latency_s = self.first_chunk_s(rt)
            rt.close()
            os.makedirs(self.a.save_profile, exist_ok=True)
            prof.save(os.path.join(self.a.save_profile, name))
            log(f"{source}: profile saved to {os.path.join(self.a.save_profile, name)}")
        return prof

    def first_chunk_s(self, rt: Runtime) -> float:
        """The best of 3 loads of the prompt's first chunk, every layer: the source's latency."""
        best = float("inf")
        for _ in range(3):
            drop_caches()
            t0 = time.perf_counter()
            with PrefixLoad(rt, self.tokens, self.table, end=CHUNK_TOKENS) as load:
                load.finish()
            best = min(best, time.perf_counter() - t0)
        return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tutti.bench.ttft", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    add_prompt_args(ap)
    ap.add_argument("--source", action="append", default=[], metavar="NAME=PATH[@BACKENDS]",
                    help="a pool to load from: zram, disk or dram (a pool under /dev/shm), and the "
                         "comma-separated backends to load it with (default: " +
                         "; ".join(f"{k} {','.join(v)}" for k, v in BACKENDS.items()) + "); repeat")
    ap.add_argument("--remote", default=None, metavar="URI",
                    help="the Redis Cluster of a remote=PATH source (redis://host:port,...)")
    ap.add_argument("--remote-connections", type=int, default=2, help="the remote source's loader threads")
    ap.add_argument("--modes", default=",".join(MODES),
                    help=f"comma-separated subset of {','.join(MODES + DIAGNOSTIC_MODES)} (default: all but "
                         f"{','.join(DIAGNOSTIC_MODES)})")
    ap.add_argument("--repeat", type=int, default=2, help="runs per row; the median is reported (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engine", default="hf", choices=["hf", "reference"],
                    help="hf: transformers' LlamaForCausalLM; reference: tutti.reference_llama (no transformers)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu only with --engine reference: checks the harness, its times mean nothing")
    ap.add_argument("--profile", default=None, metavar="DIR",
                    help="hybrid rows decide from DIR/<model>-<source>.json (python -m tutti.profile) "
                         "where it exists, instead of this run's own fit")
    ap.add_argument("--save-profile", default=None, metavar="DIR",
                    help="write this run's profile of each source to DIR/<model>-<source>.json")
    ap.add_argument("--variant", default="", help="a label for this configuration (e.g. TUTTI_DEVICE_STAGING=0), "
                                                  "part of each row's key: the same rows run again under it")
    ap.add_argument("--out", default="ttft.jsonl", help="JSON lines, appended; rows already there are skipped")
    a = ap.parse_args(argv)
    n = a.tokens
    a.prefix = prefixes(a)
    a.modes = a.modes.split(",")
    for p in a.prefix:
        if p <= 0 or p >= n or p % CHUNK_TOKENS:
            ap.error(f"prefix {p}: a multiple of {CHUNK_TOKENS} in (0, {n})")
    for m in a.modes:
        if m not in MODES + DIAGNOSTIC_MODES:
            ap.error(f"mode {m!r}: one of {', '.join(MODES + DIAGNOSTIC_MODES)}")
    sources = []
    for s in a.source:
        name, _, rest = s.partition("=")
        path, _, backends = rest.partition("@")
        if name not in BACKENDS or not path:
            ap.error(f"--source {s!r}: NAME=PATH[@BACKENDS] with NAME zram, disk, dram or remote")
        if name == "remote" and not a.remote:
            ap.error("--source remote=PATH needs --remote redis://...")
        sources.append((name, path, [x for x in backends.split(",") if x] or BACKENDS[name]))
    a.backends = {name: backends for name, _, backends in sources}
    if import_engine(ap, a, "ttft") is None:
        return 77
    b = Bench(a)
    b.compute_rows()
    for name, path, _ in sources:
        b.store_prompt(name, path)
    for name, path, _ in sources:
        b.source_rows(name, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
