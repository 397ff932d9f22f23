# SPDX-License-Identifier: Apache-2.0
"""Load or recompute: how much of a cached prefix to load, and how much to compute again.

A request of N tokens whose first P are cached can recompute everything, load all P tokens'
KV layer by layer while the other N - P compute, or split: recompute the head [0, R) in a first
pass while the tail [R, P) loads, then compute the rest over the whole prefix. Which is fastest
depends on the machine: on a slow disk loading 16 GiB takes longer than computing it again, on a
fast one it hides behind the compute. The policy predicts each choice from a Profile measured on
this machine and takes the fastest, so a request is never predicted slower than a recompute.

    profile = Profile.load("h200-llama3-8b.json")
    d = decide(profile, tokens=131072, prefix=98304, chunk_tokens=256)
    d.recompute, d.load, d.reason       # head tokens to compute again, tail tokens to load
"""
import json
from dataclasses import asdict, dataclass, field
from typing import List, Sequence, Tuple


@dataclass
class Profile:
    """One model on one machine and one storage source.

    A forward pass over q new tokens after p cached ones takes, per layer,
        fixed_s + token_s * q + pair_s * q * (p + q / 2)
    (weights and norms grow with q, attention with the query-key pairs). Loading a token's KV
    for one layer from the source takes kv_bytes_per_token_layer / load_bytes_per_s, after a
    first-byte latency."""
    model: str
    layers: int
    kv_bytes_per_token_layer: int
    fixed_s: float = 0.0
    token_s: float = 0.0
    pair_s: float = 0.0
    source: str = ""
    backend: str = ""  # the backend load_bytes_per_s was measured with
    load_bytes_per_s: float = 0.0
    load_latency_s: float = 0.0
    samples: List[Tuple[int, int, float]] = field(default_factory=list)  # (q, p, seconds) measured

    def layer_s(self, q: int, p: int) -> float:
        return self.forward_s(q, p) / self.layers

    def forward_s(self, q: int, p: int) -> float:
        """A measured sample of exactly this shape where there is one, else the fitted model:
        on the H200 a 28K-token suffix over a 4K prefix measured slower than the whole 32K
        prompt, which no smooth model predicts, and a policy trusting the fit loaded there."""
        if q <= 0:
            return 0.0
        for sq, sp, secs in self.samples:
            if (sq, sp) == (q, p):
                return secs
        return self.layers * (self.fixed_s + self.token_s * q + self.pair_s * q * (p + q / 2))

    def load_s(self, tokens: int) -> float:
        """The whole load of `tokens` tokens' KV, every layer."""
        if tokens <= 0:
            return 0.0
        if self.load_bytes_per_s <= 0:
            return float("inf")
        return self.load_latency_s + self.layers * tokens * self.kv_bytes_per_token_layer / self.load_bytes_per_s

    def fit(self, samples: Sequence[Tuple[int, int, float]]) -> "Profile":
        """Fits the compute model to whole forward passes measured as (q, p, seconds); needs
        at least three of them with different shapes."""
        import numpy as np
        rows = np.array([[1.0, q, q * (p + q / 2)] for q, p, _ in samples]) * self.layers
        secs = np.array([s for _, _, s in samples])
        coef, *_ = np.linalg.lstsq(rows, secs, rcond=None)
        self.fixed_s, self.token_s, self.pair_s = (max(float(c), 0.0) for c in coef)
        self.samples = [tuple(s) for s in samples]  # and forward_s returns them as measured
        return self

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(asdict(self), f, indent=1)

    @classmethod
    def load(cls, path: str) -> "Profile":
        with open(path) as f:
            d = json.load(f)
        d["samples"] = [tuple(s) for s in d.get("samples", [])]
        return cls(**d)


@dataclass
class Decision:
    recompute: int      # head tokens [0, recompute) computed again (all of them: no load)
    load: int           # tail tokens [recompute, recompute + load) loaded from the cache
    predicted_s: float  # predicted time to the first token
    recompute_s: float  # predicted for recomputing the whole prompt
    load_only_s: float  # predicted for loading the whole prefix
    reason: str

    @property
    def mode(self) -> str:
        if self.load == 0:
            return "recompute"
        return "load" if self.recompute == 0 else "hybrid"


def predict(profile: Profile, tokens: int, prefix: int, head: int) -> float:
    """Time to the first token when [0, head) is recomputed while [head, prefix) loads layer by
    layer, then [prefix, tokens) computes over the whole prefix, each layer starting once both
    the previous layer and the layer's loaded KV are there."""
    t = profile.forward_s(head, 0)
    tail = prefix - head
    per_layer = tail * profile.kv_bytes_per_token_layer / profile.load_bytes_per_s if tail else 0.0
    step = profile.layer_s(tokens - prefix, prefix)
    for layer in range(profile.layers):
        landed = profile.load_latency_s + (layer + 1) * per_layer if tail else 0.0
        t = max(t, landed) + step
    return t


def decide(profile: Profile, tokens: int, prefix: int, chunk_tokens: int, candidates: int = 32) -> Decision:
    """The fastest predicted way to prefill `tokens` tokens of which `prefix` (a multiple of
    chunk_tokens) are cached: a recompute, or a head of whole chunks to recompute with the rest
    of the prefix loaded."""
    recompute_s = profile.forward_s(tokens, 0)
    if prefix <= 0 or profile.load_bytes_per_s <= 0:
        why = "nothing cached" if prefix <= 0 else "no load bandwidth in the profile"
        return Decision(prefix, 0, recompute_s, recompute_s, float("inf"), f"recompute: {why}")
    load_only_s = predict(profile, tokens, prefix, 0)
    chunks = prefix // chunk_tokens
    step = max(1, chunks // candidates)
    best_head, best_s = 0, load_only_s
    for c in range(step, chunks, step):
        s = predict(profile, tokens, prefix, c * chunk_tokens)
        if s < best_s:
            best_head, best_s = c * chunk_tokens, s
    if recompute_s <= best_s:
        return Decision(prefix, 0, recompute_s, recompute_s, load_only_s,
                        f"recompute: {recompute_s:.3f} s against {best_s:.3f} s for the best load "
                        f"({profile.load_bytes_per_s / 1e9:.1f} GB/s from {profile.source or 'the source'})")
    if best_head == 0:
        why = f"load all {prefix} tokens: {best_s:.3f} s against {recompute_s:.3f} s to recompute"
    else:
        why = (f"recompute {best_head} tokens while {prefix - best_head} load: {best_s:.3f} s against "
               f"{recompute_s:.3f} s to recompute and {load_only_s:.3f} s to load all")
    return Decision(best_head, prefix - best_head, best_s, recompute_s, load_only_s, why)


def main(argv=None) -> int:
    """python -m tutti.policy --profile FILE --tokens N --prefix P: the decision and its reason."""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m tutti.policy", description=main.__doc__)
    ap.add_argument("--profile", required=True, help="a profile file (python -m tutti.profile)")
    ap.add_argument("--tokens", type=int, required=True, help="the prompt's length N")
    ap.add_argument("--prefix", type=int, required=True, help="its cached prefix P (whole chunks)")
    ap.add_argument("--chunk-tokens", type=int, default=256)
    a = ap.parse_args(argv)
    if not 0 <= a.prefix <= a.tokens or a.prefix % a.chunk_tokens:
        ap.error(f"--prefix: a multiple of {a.chunk_tokens} in [0, {a.tokens}]")
    try:
        profile = Profile.load(a.profile)
    except (OSError, ValueError, TypeError) as e:
        ap.error(f"--profile {a.profile}: {e}")
    d = decide(profile, a.tokens, a.prefix, a.chunk_tokens)
    print(json.dumps(dict(mode=d.mode, recompute=d.recompute, load=d.load, predicted_s=round(d.predicted_s, 6),
                          recompute_s=round(d.recompute_s, 6), reason=d.reason)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
