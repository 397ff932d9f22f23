# SPDX-License-Identifier: Apache-2.0
"""tutti stats and tutti fsck beside a live runtime that holds the pool: read-only, never taking
a rewrite in flight for damage, still finding real damage, and refusing --repair."""
import json
import os
import subprocess
import sys
import time

import pytest

CLI = os.environ.get("TUTTI_CLI")
pytestmark = pytest.mark.skipif(not CLI, reason="TUTTI_CLI (the tutti tool) is not set")

# A runtime in another process. "busy": stores prompt after prompt into a pool too small to keep
# them, so slots are evicted and rewritten all the time; "idle": stores four prompts and waits.
# Either writes how many prompts it has stored to COUNT and stops once STOP exists.
OWNER = """
import os, sys, time
import numpy as np
import fixture, tutti
from fixture import BLOCKS, BT, DIM, ELEM, HEADS, LAYERS
pool, mode, count, stop = sys.argv[1:5]
kv = fixture.make_kv()
rt = tutti.Runtime(pool=pool, capacity="2M", chunk_tokens=64, staging="8M")
rt.register_kv(tutti.KvLayout.paged(LAYERS, BLOCKS, BT, HEADS, DIM, ELEM, k=kv))
table = np.arange(8, dtype=np.int32)
stored = 0
while not os.path.exists(stop):
    if mode == "idle" and stored == 4:
        time.sleep(0.01)
        continue
    tokens = np.arange(1000 * (stored + 1), 1000 * (stored + 1) + 128, dtype=np.int32)
    fixture.fill(kv, tokens, table)
    with rt.batch("store") as b:
        b.add(tokens, table)
        b.submit()
        b.wait()
    stored += 1
    with open(count + ".new", "w") as f:
        f.write(str(stored))
    os.rename(count + ".new", count)
rt.close()
"""


def tool(*args):
    r = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


class Owner:
    def __init__(self, tmp_path, mode):
        self.pool, self.count, self.stop = (str(tmp_path / n) for n in ("pool", "count", "stop"))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.proc = subprocess.Popen([sys.executable, "-c", OWNER, self.pool, mode, self.count, self.stop], env=env)

    def stored(self):
        try:
            with open(self.count) as f:
                return int(f.read())
        except FileNotFoundError:
            return 0

    def wait_for(self, n):
        deadline = time.monotonic() + 60
        while self.stored() < n:
            assert self.proc.poll() is None, "the runtime process died"
            assert time.monotonic() < deadline, "the runtime stored nothing for 60 s"
            time.sleep(0.01)

    def close(self):
        open(self.stop, "w").close()
        assert self.proc.wait(timeout=60) == 0


def test_fsck_never_takes_a_rewrite_in_flight_for_damage(tmp_path):
    owner = Owner(tmp_path, "busy")
    try:
        owner.wait_for(1)
        first, runs, flux = owner.stored(), 0, 0
        # Until the runtime has rewritten the whole pool several times under the checks.
        while owner.stored() < first + 40 and runs < 2000:
            rc, out, err = tool("fsck", "--json", owner.pool)
            assert rc == 0, out + err
            report = json.loads(out)
            assert report["live"] and report["consistent"] and not report["problems"], report
            flux += report["in_flux"]
            rc, out, err = tool("stats", "--json", owner.pool)
            assert rc == 0, err
            assert json.loads(out)["live"]
            runs += 1
        assert owner.stored() >= first + 40, "the runtime stored too little while fsck ran"
        print(f"{runs} fsck runs over {owner.stored() - first} stores; {flux} findings were writes in flight")
    finally:
        owner.close()
    rc, out, err = tool("fsck", "--json", owner.pool)
    report = json.loads(out)
    assert rc == 0 and not report["live"] and report["consistent"] and report["in_flux"] == 0, report


def test_fsck_finds_damage_in_a_live_pool_and_repairs_only_when_alone(tmp_path):
    owner = Owner(tmp_path, "idle")
    try:
        owner.wait_for(4)
        rc, out, err = tool("fsck", "--json", owner.pool)
        report = json.loads(out)
        assert rc == 0 and report["live"] and report["chunks_verified"] == 8, report

        # Flip the first byte of every layer extent in the data area (1 MiB-aligned, past the
        # superblock and a 4 KiB record per slot: docs/format.md).
        stats = json.loads(tool("stats", "--json", owner.pool)[1])
        data = -(-(4096 + stats["slots"] * 4096) // (1 << 20)) * (1 << 20)
        fd = os.open(owner.pool, os.O_RDWR)
        try:
            for k in range(stats["slots"] * stats["slot_bytes"] // stats["layer_bytes"]):
                at = data + k * stats["layer_bytes"]
                os.pwrite(fd, bytes([os.pread(fd, 1, at)[0] ^ 0xFF]), at)
            os.fsync(fd)
        finally:
            os.close(fd)

        rc, out, err = tool("fsck", "--json", owner.pool)
        report = json.loads(out)
        assert rc == 4 and report["live"] and report["chunks_bad"] == 8 and report["in_flux"] == 0, report
        assert all("fails its checksum" in p["problem"] for p in report["problems"])
        rc, out, err = tool("fsck", owner.pool)
        assert rc == 4 and "held by a live runtime" in out and "run with --repair" in out

        rc, out, err = tool("fsck", "--repair", owner.pool)
        assert rc == 2 and "stop it to repair" in err, err
        assert tool("stats", owner.pool)[1].count("held by a live runtime") == 1
    finally:
        owner.close()
    rc, out, err = tool("fsck", "--repair", "--json", owner.pool)
    report = json.loads(out)
    assert rc == 0 and not report["live"] and report["cleared"] and report["records_to_clear"] == 8, report
    rc, out, err = tool("fsck", "--json", owner.pool)
    assert rc == 0 and json.loads(out)["records_valid"] == 0
