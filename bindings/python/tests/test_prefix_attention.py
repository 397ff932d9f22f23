# SPDX-License-Identifier: Apache-2.0
"""The split attention over a cached prefix: its causal square and its rectangle over the prefix,
merged by log-sum-exps, equal one bottom-right causal attention over all keys. The fused kernels
need a GPU (test_hf.py and `python -m tutti.bench.attention` run them there); here a float64
kernel on the CPU stands in for them, so what is checked is the split and the merge."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed here")

from tutti import prefix_attention as pa  # noqa: E402


def exact(query, key, value, causal, scale):
    """Attention and its log-sum-exp, the contract of the fused kernels (top-left causal flag)."""
    groups = query.shape[1] // key.shape[1]
    k, v = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    s = (query @ k.transpose(-1, -2)) * (scale if scale is not None else query.shape[-1] ** -0.5)
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


@pytest.mark.parametrize("q_len,k_len", [(40, 64), (1, 64), (63, 64), (16, 17)])
def test_split_equals_one_bottom_right_attention(q_len, k_len):
    g = torch.Generator().manual_seed(q_len * 100 + k_len)
    q = torch.randn(1, 8, q_len, 16, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, k_len, 16, generator=g, dtype=torch.float64)
    v = torch.randn(1, 2, k_len, 16, generator=g, dtype=torch.float64)
    got = pa._split(exact, q, k, v, None)
    want = pa.reference_rows(q.float(), k.float(), v.float(), torch.arange(q_len)).double()
    assert torch.allclose(got, want, atol=1e-5)


def test_split_keeps_a_large_score_gap_finite():
    # One side's log-sum-exp far above the other's: the merge must not overflow to nan.
    q = torch.zeros(1, 1, 2, 4, dtype=torch.float64)
    q[..., 0] = 1.0
    k = torch.zeros(1, 1, 6, 4, dtype=torch.float64)
    k[:, :, :4, 0] = 2000.0  # the prefix's keys dominate every query
    v = torch.arange(24, dtype=torch.float64).reshape(1, 1, 6, 4)
    got = pa._split(exact, q, k, v, 1.0)
    assert torch.isfinite(got).all()
    assert torch.allclose(got, v[:, :, :4].mean(2, keepdim=True).expand_as(got))


def test_an_unknown_method_is_refused():
    q = torch.zeros(1, 1, 1, 4)
    with pytest.raises(ValueError, match="one of"):
        pa.bottom_right(q, q.expand(1, 1, 2, 4), q.expand(1, 1, 2, 4), method="nope")


@pytest.mark.parametrize("method", pa.METHODS)
def test_every_method_on_the_gpu_matches_float32(method):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch: the fused kernels run on the GPU machine")
    g = torch.Generator(device="cuda").manual_seed(5)
    q = torch.randn(1, 32, 1000, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(1, 8, 1536, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(1, 8, 1536, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    rows = torch.arange(0, 1000, 37, device="cuda")
    got = pa.bottom_right(q, k, v, method=method)[:, :, rows].float()
    want = pa.reference_rows(q, k, v, rows)
    assert (got - want).abs().max().item() < 2e-2
