# SPDX-License-Identifier: Apache-2.0
"""The load-or-recompute policy on profiles of made-up machines: it loads everything where
loading hides behind the compute, recomputes where the source is too slow to help, splits where
the two are close, and never predicts a request slower than a recompute."""
import pytest

pytest.importorskip("numpy", reason="numpy is not installed here")

from tutti.policy import Profile, decide, predict  # noqa: E402

CHUNK = 256


def profile(gbps: float) -> Profile:
    # About an 8B model on one GPU: 32 layers, 128 KiB of KV per token, 0.1 ms + 8 µs per token
    # per layer, attention 0.25 ns per query-key pair per layer.
    return Profile(model="test-8b", layers=32, kv_bytes_per_token_layer=4096, fixed_s=1e-4,
                   token_s=8e-6 / 32, pair_s=2.5e-10 / 32 * 32, source="test",
                   load_bytes_per_s=gbps * 1e9, load_latency_s=1e-4)


def test_a_fast_source_loads_everything():
    d = decide(profile(50), tokens=32768, prefix=28672, chunk_tokens=CHUNK)
    assert (d.mode, d.recompute, d.load) == ("load", 0, 28672)
    assert d.predicted_s < d.recompute_s
    assert "load all" in d.reason


def test_a_slow_source_recomputes_more():
    # Slow: only a short tail loads while the head is computed again.
    d = decide(profile(0.05), tokens=32768, prefix=28672, chunk_tokens=CHUNK)
    assert d.mode == "hybrid" and d.recompute >= 0.9 * 28672
    # Slower still: even one chunk takes longer than the whole recompute.
    d = decide(profile(0.0001), tokens=32768, prefix=28672, chunk_tokens=CHUNK)
    assert (d.mode, d.load) == ("recompute", 0)
    assert d.predicted_s == d.recompute_s
    assert "recompute" in d.reason


def test_close_sources_split_and_beat_both():
    p = profile(1)
    found = False
    for prefix in range(4096, 32768, 4096):
        d = decide(p, tokens=32768, prefix=prefix, chunk_tokens=CHUNK)
        assert d.predicted_s <= d.recompute_s + 1e-12  # never worse than a recompute
        assert d.predicted_s <= d.load_only_s + 1e-12
        assert d.recompute % CHUNK == 0 and d.recompute + d.load == (prefix if d.load else d.recompute)
        if d.mode == "hybrid":
            found = True
            assert d.predicted_s < min(d.recompute_s, d.load_only_s)
    assert found, "no prefix where splitting beats both"


def test_nothing_cached_or_no_bandwidth_recomputes():
    assert decide(profile(50), tokens=4096, prefix=0, chunk_tokens=CHUNK).mode == "recompute"
    assert decide(profile(0), tokens=4096, prefix=2048, chunk_tokens=CHUNK).mode == "recompute"


def test_prediction_waits_for_loads_layer_by_layer():
    p = profile(1)
    compute = p.forward_s(1024, 8192)
    load = p.load_s(8192)
    t = predict(p, tokens=9216, prefix=8192, head=0)
    assert max(compute, load) <= t <= compute + load + 1e-9


def test_a_measured_shape_beats_the_fit():
    """Measured on the H200 (8B, 32K tokens): the suffix over a 4K prefix took 1.611 s, the
    whole prompt 1.395 s. The fit, smooth in the shape, predicted loading faster; with the
    measurements the policy recomputes there, and still loads where loading wins."""
    samples = [(32768, 0, 1.395), (8192, 0, 0.29), (28672, 4096, 1.611), (16384, 16384, 1.077), (4096, 28672, 0.322)]
    p = Profile(model="h200-8b", layers=32, kv_bytes_per_token_layer=4096, load_bytes_per_s=25e9).fit(samples)
    assert p.forward_s(28672, 4096) == 1.611 and p.forward_s(32768, 0) == 1.395
    assert decide(p, 32768, 4096, CHUNK).mode == "recompute"
    d = decide(p, 32768, 28672, CHUNK)
    assert d.mode == "load" and d.predicted_s < 0.5


def test_fit_recovers_the_model_and_round_trips(tmp_path):
    truth = profile(10)
    samples = [(q, pre, truth.forward_s(q, pre)) for q, pre in [(1024, 0), (8192, 0), (32768, 0), (4096, 28672)]]
    fitted = Profile(model="test-8b", layers=32, kv_bytes_per_token_layer=4096).fit(samples)
    for q, pre in [(2048, 1024), (12288, 4096), (30000, 0)]:  # shapes it did not see
        assert fitted.forward_s(q, pre) == pytest.approx(truth.forward_s(q, pre), rel=1e-6)
    fitted.save(str(tmp_path / "p.json"))
    again = Profile.load(str(tmp_path / "p.json"))
    assert again == fitted
