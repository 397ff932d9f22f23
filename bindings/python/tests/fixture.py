# SPDX-License-Identifier: Apache-2.0
"""The fixture of tests/fixture/ (tutti_fixture.h), same formula, for the Python tests: a KV cache
of fused [2, blocks, bt, heads, dim] tensors per layer, the pattern of a request's rows filled
into it and checked against it, a runtime on a pool in the test's temporary directory.

    mix(x)  = splitmix64's finalizer of x + 0x9E3779B97F4A7C15 (wrapping uint64 arithmetic)
    row     = mix(mix(mix(seed ^ (uint32)token) ^ position) ^ (layer << 32 | head << 1 | side))
    byte[i] = mix(row ^ (i // 8)) >> (8 * (i % 8))    (i: byte offset within the row)
"""

import struct

import numpy as np

import tutti

LAYERS, BLOCKS, BT, HEADS, DIM, ELEM = 3, 64, 16, 2, 64, 2
ROW = DIM * ELEM
POISON = 0xA5

# (seed, token, position, layer, side, head, byte) -> value, computed by tests/fixture's C code
# (fixture_test.c checks the same table).
KNOWN = [
    ((0, 0, 0, 0, 0, 0, 0), 0x68),
    ((0, 1000, 0, 0, 0, 0, 0), 0xB9),
    ((0, 1000, 17, 2, 1, 1, 77), 0x64),
    ((0, 5063, 63, 1, 0, 1, 127), 0x58),
    ((7, 42, 300, 3, 1, 7, 255), 0x36),
    ((0x123456789ABCDEF0, 49999, 8191, 31, 1, 3, 4095), 0xFD),
]

_U = np.uint64


def _mix(x):
    with np.errstate(over="ignore"):
        x = x + _U(0x9E3779B97F4A7C15)
        x = (x ^ (x >> _U(30))) * _U(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> _U(27))) * _U(0x94D049BB133111EB)
        return x ^ (x >> _U(31))


def pattern(tokens, positions, seed=0, layers=LAYERS, heads=HEADS, row=ROW):
    """The rows of these tokens at these positions: uint8 [layers, 2 (K, V), n, heads, row]."""
    tok = np.atleast_1d(np.asarray(tokens)).astype(np.int64).astype(np.uint32).astype(np.uint64)
    pos = np.atleast_1d(np.asarray(positions, dtype=np.uint64))
    x = _mix(_mix(_U(seed) ^ tok) ^ pos)
    key = ((np.arange(layers, dtype=np.uint64)[:, None, None, None] << _U(32))
           | (np.arange(heads, dtype=np.uint64)[None, None, None, :] << _U(1))
           | np.arange(2, dtype=np.uint64)[None, :, None, None])
    rows = _mix(x[None, None, :, None] ^ key)
    words = _mix(rows[..., None] ^ np.arange((row + 7) // 8, dtype=np.uint64))
    return words.astype("<u8").view(np.uint8)[..., :row]


def byte(seed, token, position, layer, side, head, i):
    """One byte of the pattern (the known answers)."""
    rows = pattern([token], [position], seed, layer + 1, head + 1, i + 1)
    return int(rows[layer, side, 0, head, i])


def make_kv():
    """One fused [2, blocks, bt, heads, dim] fp16-sized tensor per layer, every byte poison."""
    return [np.full((2, BLOCKS, BT, HEADS, DIM), POISON * 0x101, dtype=np.uint16) for _ in range(LAYERS)]


def poison(kv):
    for layer in kv:
        layer[...] = POISON * 0x101


def _bytes(layer):
    """A layer as uint8 [2, blocks, bt, heads, row] (numpy as is; torch tensors copied to host)."""
    if hasattr(layer, "cpu"):
        layer = layer.cpu().numpy()
    return layer.view(np.uint8)


def fill(kv, tokens, table, begin=0, end=None, seed=0):
    """Writes the pattern of positions [begin, end) into the table's blocks (numpy layers)."""
    tokens, table = np.asarray(tokens), np.asarray(table)
    end = len(tokens) if end is None else min(end, len(tokens))
    pos = np.arange(begin, end)
    want = pattern(tokens[begin:end], pos, seed, len(kv))
    for l, layer in enumerate(kv):
        _bytes(layer)[:, table[pos // BT], pos % BT] = want[l]


def check(kv, tokens, table, begin=0, end=None, seed=0, layers=None):
    """Rows of positions [begin, end) of `layers` (default all) against the pattern: raises
    AssertionError naming the first wrong byte (layer, K/V, token, block, head, byte) and both
    values, and how many rows differ."""
    tokens, table = np.asarray(tokens), np.asarray(table)
    end = len(tokens) if end is None else min(end, len(tokens))
    pos = np.arange(begin, end)
    want = pattern(tokens[begin:end], pos, seed, len(kv))
    bad, first = 0, None
    for l in range(len(kv)) if layers is None else layers:
        got = _bytes(kv[l])[:, table[pos // BT], pos % BT]
        diff = got != want[l]
        if not diff.any():
            continue
        bad += int(diff.any(axis=-1).sum())
        if first is None:
            s, t, h, i = (int(v) for v in np.argwhere(diff)[0])
            p = int(pos[t])
            first = (f"token {p} (block {int(table[p // BT])} slot {p % BT}) layer {l} {'KV'[s]} head {h} "
                     f"byte {i}: got {int(got[s, t, h, i]):#04x}, expected {int(want[l][s, t, h, i]):#04x}")
    if bad:
        raise AssertionError(f"{bad} rows differ from the stored bytes; first: {first}")


def open_runtime(tmp_path, kv, **extra):
    """A runtime on a pool in pytest's temporary directory, kv registered."""
    rt = tutti.Runtime(pool=str(tmp_path / "pool"), capacity="64M", chunk_tokens=64, staging="8M", **extra)
    rt.register_kv(tutti.KvLayout.paged(LAYERS, BLOCKS, BT, HEADS, DIM, ELEM, k=kv))
    return rt


def store(rt, tokens, table):
    """Stores the prompt from its blocks, all of it, and waits for the commit."""
    with rt.batch("store") as b:
        b.add(tokens, table)
        b.submit()
        b.wait()


def pool_slots(path):
    """(byte offset of the data area, bytes per slot) of a pool file, from its superblock."""
    with open(path, "rb") as f:
        sb = f.read(4096)
    slot_bytes, slots = struct.unpack_from("<QQ", sb, 80)
    data = (4096 + 4096 * slots + (1 << 20) - 1) // (1 << 20) * (1 << 20)
    return data, slot_bytes


def damage(path, slots, at):
    """Flips one byte in each of these slots: at byte `at`, or inside layer 1's K."""
    data, slot_bytes = pool_slots(path)
    with open(path, "r+b") as f:
        for s in slots:
            f.seek(data + s * slot_bytes + (slot_bytes // 3 + 5 if at == "layer 1" else at))
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0x40]))
