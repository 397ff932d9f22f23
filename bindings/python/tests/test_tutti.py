"""The Python binding against a real pool: bytes stored are the bytes loaded, no copies of token
ids or block tables, errors as exceptions. GPU tests use torch CUDA tensors where available."""

import array
import os
import re

import numpy as np
import pytest

import tutti
from tutti import tutti_c

LAYERS, BLOCKS, BT, HEADS, DIM = 3, 64, 16, 2, 64


def make_kv(seed):
    """One fused [2, blocks, bt, heads, dim] fp16-sized tensor per layer, random bytes."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 1 << 16, size=(2, BLOCKS, BT, HEADS, DIM), dtype=np.uint16) for _ in range(LAYERS)]


def open_runtime(tmp_path, kv, **extra):
    rt = tutti.Runtime(pool=str(tmp_path / "pool"), capacity="64M", chunk_tokens=64, staging="8M", **extra)
    rt.register_kv(tutti.KvLayout.paged(LAYERS, BLOCKS, BT, HEADS, DIM, 2, k=kv))
    return rt


def blocks_of(kv, table):
    return [layer[:, table].copy() for layer in kv]


def test_store_lookup_load_layer_by_layer(tmp_path):
    kv = make_kv(1)
    tokens = np.arange(1000, 1000 + 320, dtype=np.int32)  # 5 chunks of 64
    table = np.random.default_rng(2).permutation(BLOCKS)[: 320 // BT].astype(np.int32)
    want = blocks_of(kv, table)
    with open_runtime(tmp_path, kv) as rt:
        assert rt.backend in ("uring", "posix")
        assert rt.lookup(tokens) == 0
        with rt.batch("store") as b:
            assert b.add(tokens, table) == 0
            b.submit()
            b.wait()
            assert b.result(0) == tutti.Result(0, 5, 5, 320)
        assert rt.lookup(tokens) == 320
        assert rt.lookup(tokens[:100]) == 64  # whole chunks only
        for layer in kv:
            layer[...] = 0
        with rt.batch("load") as b:
            b.add(tokens, table)
            b.submit()
            for l in range(LAYERS):
                b.wait_layer(l)
                np.testing.assert_array_equal(kv[l][:, table], want[l], err_msg=f"layer {l}")
            b.wait()
            assert b.chunk_status(0) == [0] * 5
        s = rt.stats()
        assert s["stored_chunks"] == 5 and s["bytes_read"] > 0 and s["layer_waits"] == LAYERS
        assert len(rt.layer_wait_ns()) == LAYERS


def test_buffers_of_any_kind_and_salts(tmp_path):
    kv = make_kv(3)
    tokens = array.array("i", range(128))
    table = array.array("i", range(8))
    with open_runtime(tmp_path, kv) as rt:
        with rt.batch("store") as b:
            b.add(tokens, table, salt=b"lora-7")
            b.submit()
            b.wait()
        assert rt.lookup(tokens) == 0  # another salt: another key
        assert rt.lookup(tokens, salt=b"lora-7") == 128
        assert rt.lookup(memoryview(tokens), salt=bytearray(b"lora-7")) == 128


def test_several_requests_and_a_range(tmp_path):
    kv = make_kv(4)
    a = np.arange(0, 128, dtype=np.int32)
    c = np.arange(5000, 5192, dtype=np.int32)
    ta, tc = np.arange(0, 8, dtype=np.int32), np.arange(8, 20, dtype=np.int32)
    with open_runtime(tmp_path, kv) as rt:
        with rt.batch("store") as b:
            b.add_many([tutti.Request(a, ta), tutti.Request(c, tc)])
            b.submit()
            b.wait()
            assert b.result(1).chunks_ok == 3
        want = blocks_of(kv, tc[4:8])
        for layer in kv:
            layer[...] = 0
        with rt.batch("load") as b:
            b.add(c, tc, token_begin=64, token_end=128)  # the second chunk only
            b.submit()
            b.wait()
            assert b.result(0).tokens == 64
        for l in range(LAYERS):
            np.testing.assert_array_equal(kv[l][:, tc[4:8]], want[l])
            assert not kv[l][:, tc[:4]].any()  # the first chunk was not asked for


def test_errors_are_exceptions_with_codes(tmp_path):
    with pytest.raises(tutti.Error) as e:
        tutti.Runtime(chunk_tokens="twelve")
    assert e.value.code == tutti_c.TUTTI_EINVAL and "chunk_tokens" in e.value.message
    kv = make_kv(5)
    rt = open_runtime(tmp_path, kv)
    with pytest.raises(TypeError):
        rt.lookup(np.arange(64, dtype=np.int64))  # token ids are int32
    with rt.batch("load") as b:
        with pytest.raises(tutti.Error) as e:
            b.add(np.arange(64, dtype=np.int32), np.array([BLOCKS + 5] * 4, dtype=np.int32))
        assert e.value.code == tutti_c.TUTTI_EINVAL and "outside" in e.value.message
        with pytest.raises(tutti.Error) as e:
            b.wait()
        assert e.value.code == tutti_c.TUTTI_ESTATE
    with pytest.raises(ValueError):
        rt.batch("copy")
    rt.close()
    with pytest.raises(tutti.Error) as e:
        rt.lookup(np.arange(64, dtype=np.int32))
    assert e.value.code == tutti_c.TUTTI_ESTATE


def test_every_function_of_the_header_is_bound():
    here = os.path.dirname(os.path.abspath(__file__))
    header = open(os.environ.get("TUTTI_HEADER", os.path.join(here, "../../../include/tutti.h"))).read()
    names = re.findall(r"TUTTI_API[^;(]*?\b(tutti_\w+)\s*\(", header)
    assert len(names) >= 20
    missing = [n for n in names if not hasattr(tutti_c, n)]
    assert not missing, f"functions of tutti.h missing from the Python binding: {missing}"


def test_version():
    assert tutti.version().startswith("0.")
    assert tutti_c.tutti_version_number() == tutti_c.TUTTI_VERSION_NUMBER


def test_torch_cuda_tensors(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed here")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    gen = torch.Generator().manual_seed(6)
    kv = [torch.randint(0, 1 << 15, (2, BLOCKS, BT, HEADS, DIM), dtype=torch.int16, generator=gen).cuda()
          for _ in range(LAYERS)]
    tokens = torch.arange(256, dtype=torch.int32)
    table = torch.randperm(BLOCKS, generator=gen)[:16].to(torch.int32)
    want = [layer[:, table.long()].clone() for layer in kv]
    rt = tutti.Runtime(pool=str(tmp_path / "pool"), capacity="64M", chunk_tokens=64)
    rt.register_kv(tutti.KvLayout.paged(LAYERS, BLOCKS, BT, HEADS, DIM, 2, k=kv, memory=tutti.MEMORY_CUDA))
    with rt.batch("store") as b:
        b.add(tokens, table)
        b.submit()
        b.wait()
    for layer in kv:
        layer.zero_()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with rt.batch("load") as b:
        b.add(tokens, table)
        b.submit()
        for l in range(LAYERS):
            b.wait_layer(l, stream=stream)  # stream-ordered: the copy below runs after the load
            with torch.cuda.stream(stream):
                got = kv[l][:, table.long()].clone()
            stream.synchronize()
            assert torch.equal(got, want[l]), f"layer {l}"
        b.wait()
    rt.close()
