# SPDX-License-Identifier: Apache-2.0
"""The Python binding against a real pool: bytes stored are the bytes loaded (the pattern of the
shared fixture, fixture.py), no copies of token ids or block tables, errors as exceptions. GPU
tests use torch CUDA tensors where available."""

import array
import os
import re

import numpy as np
import pytest

import fixture
import tutti
from fixture import BLOCKS, BT, DIM, ELEM, HEADS, LAYERS, POISON, make_kv, open_runtime
from tutti import tutti_c


def test_fixture_pattern_known_answers():
    # The values tests/fixture/fixture_test.c checks: the formula is the C fixture's.
    for args, want in fixture.KNOWN:
        assert fixture.byte(*args) == want, f"pattern{args}"


def test_store_lookup_load_layer_by_layer(tmp_path):
    kv = make_kv()
    tokens = np.arange(1000, 1000 + 320, dtype=np.int32)  # 5 chunks of 64
    table = np.random.default_rng(2).permutation(BLOCKS)[: 320 // BT].astype(np.int32)
    fixture.fill(kv, tokens, table)
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
        fixture.poison(kv)
        with rt.batch("load") as b:
            b.add(tokens, table)
            b.submit()
            for l in range(LAYERS):
                b.wait_layer(l)
                fixture.check(kv, tokens, table, layers=[l])
            b.wait()
            assert b.chunk_status(0) == [0] * 5
        s = rt.stats()
        assert s["stored_chunks"] == 5 and s["bytes_read"] > 0 and s["layer_waits"] == LAYERS
        assert len(rt.layer_wait_ns()) == LAYERS


def test_store_by_layer(tmp_path):
    """A store an engine makes while it computes: a layer is written only once declared ready
    (the blocks held the poison until then), and the prompt is visible after the last."""
    kv, computed = make_kv(), make_kv()
    tokens = np.arange(5000, 5000 + 256, dtype=np.int32)
    table = np.random.default_rng(4).permutation(BLOCKS)[: 256 // BT].astype(np.int32)
    fixture.fill(computed, tokens, table)
    fixture.poison(kv)
    with open_runtime(tmp_path, kv) as rt:
        with rt.batch("store_by_layer") as b:
            b.add(tokens, table)
            b.submit()
            assert b.poll() == (0, False)  # nothing is written before it is ready
            for l in range(LAYERS):
                assert rt.lookup(tokens) == 0
                kv[l][...] = computed[l]  # the engine computes layer l
                b.layer_ready(l)
            b.wait()
            assert b.poll() == (LAYERS, True)
            assert b.result(0) == tutti.Result(0, 4, 4, 256)
            with pytest.raises(tutti.Error) as e:
                b.layer_ready(0)
            assert e.value.code == tutti_c.TUTTI_EINVAL
        assert rt.lookup(tokens) == 256
        fixture.poison(kv)
        with rt.batch("load") as b:
            b.add(tokens, table)
            b.submit()
            b.wait()
        fixture.check(kv, tokens, table)


def test_a_lease_keeps_a_prefix_from_eviction(tmp_path):
    kv = make_kv()
    table = np.arange(8, dtype=np.int32)
    rt = tutti.Runtime(pool=str(tmp_path / "pool"), capacity="2M", chunk_tokens=64, staging="8M")
    rt.register_kv(tutti.KvLayout.paged(LAYERS, BLOCKS, BT, HEADS, DIM, ELEM, k=kv))
    leased = np.arange(128, dtype=np.int32)
    fixture.fill(kv, leased, table)
    with rt.batch("store") as b:
        b.add(leased, table)
        b.submit()
        b.wait()

    def store_others(seed):
        for i in range(rt.stats()["slots_total"] // 2 + 4):
            with rt.batch("store") as b:
                b.add(np.arange(10_000 * (seed + i + 1), 10_000 * (seed + i + 1) + 128, dtype=np.int32), table)
                b.submit()
                b.wait()

    with rt.lookup_lease(leased) as lease:
        assert lease.tokens == 128
        store_others(0)
        assert rt.stats()["evictions"] > 0 and rt.lookup(leased) == 128
        fixture.poison(kv)
        with rt.batch("load") as b:
            b.add(leased, table)
            b.submit()
            b.wait()
        fixture.check(kv, leased, table)
    store_others(1000)
    assert rt.lookup(leased) == 0  # released: evictable again
    assert rt.lookup_lease(np.arange(7, 71, dtype=np.int32), ttl_ms=5).tokens == 0
    rt.close()


OWNER = """
import sys
import numpy as np
import fixture, tutti
from fixture import BLOCKS, BT, DIM, ELEM, HEADS, LAYERS
pool, sock = sys.argv[1:3]
kv = fixture.make_kv()
rt = tutti.Runtime(pool=pool, capacity="64M", chunk_tokens=64, staging="8M", lookup_socket=sock)
rt.register_kv(tutti.KvLayout.paged(LAYERS, BLOCKS, BT, HEADS, DIM, ELEM, k=kv))
tokens, table = np.arange(3000, 3150, dtype=np.int32), np.arange(10, dtype=np.int32)
fixture.fill(kv, tokens, table)
with rt.batch("store") as b:
    b.add(tokens, table)
    b.submit()
    b.wait()
print("ready", flush=True)
sys.stdin.read()  # until killed
"""


def test_a_client_asks_a_runtime_in_another_process(tmp_path):
    import signal
    import subprocess
    import sys

    sock = str(tmp_path / "lookup.sock")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path / "pool"), sock], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert owner.stdout.readline().strip() == "ready"
        tokens = np.arange(3000, 3150, dtype=np.int32)
        with tutti.LookupClient(sock, timeout_ms=5000) as client:
            assert client.lookup(tokens) == 128
            assert client.lookup(tokens, salt=b"x") == 0
            hit, lease = client.lookup_lease(tokens, ttl_ms=0)
            assert hit == 128 and lease > 0
            client.release(lease)
            hit, lease = client.lookup_lease(tokens)
            owner.send_signal(signal.SIGKILL)
            owner.wait()
            with pytest.raises(tutti.Error) as e:
                client.lookup(tokens)
            assert e.value.code == tutti_c.TUTTI_EIO  # a dead owner: a miss
            client.release(lease)  # it ended with the connection: nothing
        with pytest.raises(tutti.Error) as e:
            client.lookup(tokens)
        assert e.value.code == tutti_c.TUTTI_ESTATE  # closed
        with pytest.raises(tutti.Error) as e:
            tutti.LookupClient(sock)
        assert e.value.code == tutti_c.TUTTI_EIO
    finally:
        owner.kill()
        owner.wait()


def test_tuttis_log_reaches_python_logging(tmp_path, caplog):
    import logging
    import socket
    import time

    sock = str(tmp_path / "lookup.sock")
    rt = open_runtime(tmp_path, make_kv(), lookup_socket=sock)  # serving from register_kv on
    logger = logging.getLogger("tutti.test")
    logger.setLevel(logging.WARNING)
    tutti.log_to_python(logger)
    try:
        with caplog.at_level(logging.WARNING, logger="tutti.test"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:  # a stranger's bytes
                s.connect(sock)
                s.sendall(b"GET / HTTP/1.1\r\n\r\n" + bytes(32))
                try:
                    while s.recv(4096):
                        pass
                except ConnectionResetError:  # it hung up on bytes it had not read
                    pass
            for _ in range(500):
                if caplog.records:
                    break
                time.sleep(0.002)
        assert [r.levelno for r in caplog.records] == [logging.WARNING]
        assert "hung up" in caplog.records[0].getMessage()
    finally:
        tutti_c.tutti_set_log_callback(None, 0)
        rt.close()
    with pytest.raises(TypeError):
        tutti_c.tutti_set_log_callback(42, 0)


def test_counters_as_prometheus_metrics(tmp_path):
    import tutti.metrics as metrics

    kv = make_kv()
    rt = open_runtime(tmp_path, kv)
    tokens, table = np.arange(1000, 1128, dtype=np.int32), np.arange(8, dtype=np.int32)
    fixture.fill(kv, tokens, table)
    fixture.store(rt, tokens, table)
    with rt.batch("load") as b:
        b.add(tokens, table)
        b.submit()
        for layer in range(LAYERS):
            b.wait_layer(layer)
        b.wait()
    assert rt.lookup(tokens) == 128
    text = metrics.prometheus_text(rt, labels={"rank": "0", "pool": 'a "quoted"\\path'})
    values, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            types[name] = kind
            continue
        if line.startswith("#"):
            continue
        m = re.fullmatch(r'([a-z_]+)\{(.*)\} (\S+)', line)
        assert m, line
        assert 'pool="a \\"quoted\\"\\\\path"' in m.group(2) and 'rank="0"' in m.group(2), line
        values.setdefault(m.group(1), []).append(float(m.group(3)))
    stats = rt.stats()
    assert values["tutti_lookups_total"] == [stats["lookups"]] and stats["lookups"] >= 1
    assert values["tutti_stored_chunks_total"] == [2.0]
    assert values["tutti_read_bytes_total"] == [stats["bytes_read"]] and stats["bytes_read"] > 0
    assert values["tutti_slots"] == [stats["slots_total"]] and types["tutti_slots"] == "gauge"
    assert len(values["tutti_layer_wait_by_layer_seconds_total"]) == LAYERS
    assert all(types[n] == "counter" for n in values if n.endswith("_total"))
    hists = {h[1]: h[0] for h in metrics.HISTOGRAMS}
    assert set(values) == {m[1] for m in metrics.METRICS} | {metrics.PER_LAYER[0]} | {
        name + part for name in hists for part in ("_bucket", "_sum", "_count")}
    assert all(types[name] == "histogram" for name in hists)
    counts = {"layer_wait": LAYERS, "load": 1, "store": 1}  # one wait per layer, one batch each
    for name, kind in hists.items():
        buckets = values[name + "_bucket"]
        assert buckets == sorted(buckets) and buckets[-1] == values[name + "_count"][0] == counts[kind], name
        assert values[name + "_sum"][0] > 0 or kind == "layer_wait"
    h = rt.histogram("layer_wait")
    assert h["count"] == LAYERS and h["buckets"][-1] == (float("inf"), LAYERS)
    assert h["sum_s"] == pytest.approx(stats["layer_wait_ns"] / 1e9)
    with pytest.raises(ValueError, match="histogram kind"):
        rt.histogram("bubble")

    prometheus_client = pytest.importorskip("prometheus_client", reason="prometheus_client is not installed")
    registry = prometheus_client.CollectorRegistry()
    metrics.register(rt, labels={"rank": "0"}, registry=registry)
    scraped = prometheus_client.generate_latest(registry).decode()
    assert f'tutti_lookups_total{{rank="0"}} {float(stats["lookups"])}' in scraped
    assert 'tutti_layer_wait_by_layer_seconds_total{layer="0",rank="0"}' in scraped
    assert 'tutti_load_batch_duration_seconds_count{rank="0"} 1.0' in scraped
    assert 'tutti_load_batch_duration_seconds_bucket{le="+Inf",rank="0"} 1.0' in scraped
    rt.close()


def test_kv_events(tmp_path):
    """What a router subscribes to: chunks stored (with their tokens and parents, in the
    prompt's order) and removed."""
    kv = make_kv()
    rt = open_runtime(tmp_path, kv, kv_events=64)
    tokens, table = np.arange(1000, 1128, dtype=np.int32), np.arange(8, dtype=np.int32)
    fixture.fill(kv, tokens, table)
    fixture.store(rt, tokens, table)
    events, dropped = rt.events()
    assert dropped == 0 and [e.type for e in events] == ["stored", "stored"]
    assert events[0].tokens == list(range(1000, 1064)) and events[1].tokens == list(range(1064, 1128))
    assert events[1].parent == events[0].key and events[0].key != events[1].key and events[0].parent is None
    assert rt.events() == ([], 0)
    rt.close()
    rt = open_runtime(tmp_path, kv)
    with pytest.raises(tutti.Error) as e:
        rt.events()
    assert e.value.code == tutti.tutti_c.TUTTI_ESTATE
    rt.close()


def test_buffers_of_any_kind_and_salts(tmp_path):
    kv = make_kv()
    tokens = array.array("i", range(128))
    table = array.array("i", range(8))
    fixture.fill(kv, tokens, table, seed=7)
    with open_runtime(tmp_path, kv) as rt:
        with rt.batch("store") as b:
            b.add(tokens, table, salt=b"lora-7")
            b.submit()
            b.wait()
        assert rt.lookup(tokens) == 0  # another salt: another key
        assert rt.lookup(tokens, salt=b"lora-7") == 128
        assert rt.lookup(memoryview(tokens), salt=bytearray(b"lora-7")) == 128
        other = array.array("i", range(8, 16))
        with rt.batch("load") as b:
            b.add(memoryview(tokens), other, salt=bytearray(b"lora-7"))
            b.submit()
            b.wait()
            assert b.result(0).tokens == 128
        fixture.check(kv, tokens, other, seed=7)


def test_several_requests_and_a_range(tmp_path):
    kv = make_kv()
    a = np.arange(0, 128, dtype=np.int32)
    c = np.arange(5000, 5192, dtype=np.int32)
    ta, tc = np.arange(0, 8, dtype=np.int32), np.arange(8, 20, dtype=np.int32)
    fixture.fill(kv, a, ta)
    fixture.fill(kv, c, tc)
    with open_runtime(tmp_path, kv) as rt:
        with rt.batch("store") as b:
            b.add_many([tutti.Request(a, ta), tutti.Request(c, tc)])
            b.submit()
            b.wait()
            assert b.result(1).chunks_ok == 3
        fixture.poison(kv)
        with rt.batch("load") as b:
            b.add(c, tc, token_begin=64, token_end=128)  # the second chunk only
            b.submit()
            b.wait()
            assert b.result(0).tokens == 64
        fixture.check(kv, c, tc, 64, 128)
        for l in range(LAYERS):
            # the first and third chunks were not asked for
            assert (kv[l][:, tc[:4]] == POISON * 0x101).all(), f"layer {l}"
            assert (kv[l][:, tc[8:]] == POISON * 0x101).all(), f"layer {l}"


def test_requests_from_a_generator_and_strided_tensors_keep_their_buffers(tmp_path):
    """tutti reads a request's tokens and block table until the batch ends: the batch keeps
    what add_many took from a generator, and a tensor tutti cannot read as it lies (a strided
    view, another dtype) goes in as a contiguous int32 copy the request keeps."""
    import gc
    import weakref
    torch = pytest.importorskip("torch", reason="torch is not installed here")
    kv = make_kv()
    tokens = np.arange(300, 428, dtype=np.int32)
    table = np.arange(8, 16, dtype=np.int32)
    fixture.fill(kv, tokens, table, seed=3)
    with open_runtime(tmp_path, kv) as rt:
        with rt.batch("store") as b:
            refs = []

            def requests():
                t, bt = array.array("i", tokens), array.array("i", table)
                refs.extend([weakref.ref(t), weakref.ref(bt)])
                yield tutti.Request(t, bt)

            b.add_many(requests())
            gc.collect()
            assert all(r() is not None for r in refs), "the batch let go of its request's buffers"
            b.submit()
            b.wait()
        fixture.poison(kv)
        # every other entry of a wider table, and tokens as int64: other numbers if read raw
        wide = torch.zeros(16, dtype=torch.int32)
        wide[::2] = torch.arange(20, 28, dtype=torch.int32)
        other = wide[::2]
        assert not other.is_contiguous()
        with rt.batch("load") as b:
            b.add(torch.from_numpy(tokens).long(), other)
            b.submit()
            b.wait()
            assert b.result(0).tokens == 128
        fixture.check(kv, tokens, np.arange(20, 28, dtype=np.int32), seed=3)


def test_errors_are_exceptions_with_codes(tmp_path):
    with pytest.raises(tutti.Error) as e:
        tutti.Runtime(chunk_tokens="twelve")
    assert e.value.code == tutti_c.TUTTI_EINVAL and "chunk_tokens" in e.value.message
    kv = make_kv()
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


def test_stats_has_every_counter_of_the_header(tmp_path):
    here = os.path.dirname(os.path.abspath(__file__))
    header = open(os.environ.get("TUTTI_HEADER", os.path.join(here, "../../../include/tutti.h"))).read()
    body = re.search(r"typedef struct tutti_stats \{(.*?)\} tutti_stats;", header, re.S).group(1)
    fields = [f for f in re.findall(r"^\s*uint\d+_t (\w+);", body, re.M) if f != "struct_size"]
    assert "tier_hits" in fields and "layer_waits" in fields
    kv = make_kv()
    with open_runtime(tmp_path, kv) as rt:
        assert list(rt.stats()) == fields


def test_a_layout_checks_its_buffers_and_keeps_them_alive():
    import gc
    import weakref
    args = (LAYERS, BLOCKS, BT, HEADS, DIM, 2)
    short = [np.zeros((2, BLOCKS - 1, BT, HEADS, DIM), dtype=np.uint16) for _ in range(LAYERS)]
    with pytest.raises(ValueError, match="layer 0's K holds"):
        tutti.KvLayout.paged(*args, k=short)
    k = [np.zeros((BLOCKS, BT, HEADS, DIM), dtype=np.uint16) for _ in range(LAYERS)]
    v = [np.zeros((BLOCKS, BT, HEADS, DIM), dtype=np.uint16) for _ in range(LAYERS - 1)] + [short[0][0]]
    with pytest.raises(ValueError, match=f"layer {LAYERS - 1}'s V holds"):
        tutti.KvLayout.paged(*args, k=k, v=v)
    with pytest.raises(ValueError, match="not contiguous|C-contiguous|contiguous"):
        tutti.KvLayout.paged(*args, k=[np.zeros((2, BLOCKS, BT, HEADS, 2 * DIM), dtype=np.uint16)[..., ::2]] * LAYERS)
    kv = make_kv()
    alive = weakref.ref(kv[0])
    layout = tutti.KvLayout.paged(*args, k=kv)
    del kv
    gc.collect()
    assert alive() is not None  # the layout holds the engine's tensors while tutti may write them
    del layout
    gc.collect()
    assert alive() is None


def test_version():
    assert tutti.version().startswith("0.")
    assert tutti_c.tutti_version_number() == tutti_c.TUTTI_VERSION_NUMBER


def test_torch_cuda_tensors(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed here")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    gen = torch.Generator().manual_seed(6)
    tokens = torch.arange(256, dtype=torch.int32)
    table = torch.randperm(BLOCKS, generator=gen)[:16].to(torch.int32)
    host = make_kv()
    fixture.fill(host, tokens.numpy(), table.numpy())
    kv = [torch.from_numpy(layer.view(np.int16)).cuda() for layer in host]
    rt = tutti.Runtime(pool=str(tmp_path / "pool"), capacity="64M", chunk_tokens=64)
    rt.register_kv(tutti.KvLayout.paged(LAYERS, BLOCKS, BT, HEADS, DIM, 2, k=kv, memory=tutti.MEMORY_CUDA))
    fixture.store(rt, tokens, table)
    for layer in kv:
        layer.zero_()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    snaps = []
    with rt.batch("load") as b:
        b.add(tokens, table)
        b.submit()
        for l in range(LAYERS):
            b.wait_layer(l, stream=stream)  # stream-ordered: the copy below runs after the load
            with torch.cuda.stream(stream):
                snaps.append(kv[l].clone())
            stream.synchronize()
            fixture.check(snaps, tokens.numpy(), table.numpy(), layers=[l])
        b.wait()
    rt.close()


def test_torch_cuda_store_by_layer(tmp_path):
    """Layers declared ready in the order of a CUDA stream whose work is still running (a long
    sleep kernel first): tutti's writer waits for that work, so the pool gets the computed KV,
    never the zeros that were in the blocks before."""
    torch = pytest.importorskip("torch", reason="torch is not installed here")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    gen = torch.Generator().manual_seed(8)
    tokens = torch.arange(7000, 7000 + 256, dtype=torch.int32)
    table = torch.randperm(BLOCKS, generator=gen)[:16].to(torch.int32)
    host = make_kv()
    fixture.fill(host, tokens.numpy(), table.numpy())
    computed = [torch.from_numpy(layer.view(np.int16)).cuda() for layer in host]
    kv = [torch.zeros_like(layer) for layer in computed]
    rt = tutti.Runtime(pool=str(tmp_path / "pool"), capacity="64M", chunk_tokens=64)
    rt.register_kv(tutti.KvLayout.paged(LAYERS, BLOCKS, BT, HEADS, DIM, 2, k=kv, memory=tutti.MEMORY_CUDA))
    stream = torch.cuda.Stream()
    with rt.batch("store_by_layer") as b:
        b.add(tokens, table)
        b.submit()
        with torch.cuda.stream(stream):
            for l in range(LAYERS):
                torch.cuda._sleep(50_000_000)  # tens of ms of GPU time before the layer is written
                kv[l].copy_(computed[l])
                b.layer_ready(l, stream=stream)
        b.wait()
    stream.synchronize()
    for layer in kv:
        layer.zero_()
    with rt.batch("load") as b:
        b.add(tokens, table)
        b.submit()
        b.wait()
    torch.cuda.synchronize()
    fixture.check(kv, tokens.numpy(), table.numpy())
    rt.close()
