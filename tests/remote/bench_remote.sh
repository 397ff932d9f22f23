#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tutti bench --remote against a Redis Cluster of its own (tools/redis-cluster): every value read
# back verified, the keys deleted afterwards, and a cluster that is not there refused clearly.
#   bench_remote.sh TUTTI_CLI      exit 77 without redis-server
set -euo pipefail
tutti=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
  { echo "skip: redis-server or redis-cli not found (Debian: redis-server redis-tools)"; exit 77; }
dir=$(mktemp -d)
base=$((10000 + RANDOM % 1100 * 10))
trap '"$src/tools/redis-cluster" stop "$dir"' EXIT
uri=$("$src/tools/redis-cluster" start "$dir" "$base")
fail() { echo "FAIL $*"; exit 1; }

out=$("$tutti" bench --remote "$uri" --model tiny --tokens 2048 --remote-connections 3 --json)
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines()]
info, rows = rows[0], rows[1:]
assert info["run_info"] and info["bench"] == "remote" and info["masters"] == 3 and info["nodes"] == 6, info
assert [(r["bench"], r["connections"]) for r in rows] == [
    ("remote-set", 1), ("remote-get", 1), ("remote-set", 2), ("remote-get", 2), ("remote-set", 3), ("remote-get", 3),
    ("remote-tier-write", 1), ("remote-tier-load", 1), ("remote-tier-load", 2), ("remote-tier-load", 3)], rows
for r in rows:
    assert r["failed"] == 0 and r["gbps"] > 0 and r["bytes"] == info["values"] * info["value_bytes"], r
    assert r["verified"] == (r["bench"] in ("remote-get", "remote-tier-load")), r
print("ok   bench --remote: %d rows, every value read back verified" % len(rows))
PY
[ "$(redis-cli -p "$base" --cluster call "127.0.0.1:$base" DBSIZE 2>/dev/null | grep -c ': 0$')" -eq 6 ] ||
  fail "bench --remote left keys behind"
echo "ok   no key left behind"
table=$("$tutti" bench --remote "$uri" --model tiny --tokens 2048)
grep -qE "^get +1 .* ok$" <<<"$table" || fail "the table says no 'ok': $table"
grep -qE "^tier-load +1 .* ok$" <<<"$table" || fail "no verified load through the tier: $table"
echo "ok   a load through the tier, every byte compared"

# No cluster there: a clear error, exit 2, in bounded time.
"$src/tools/redis-cluster" stop "$dir"
trap - EXIT
set +e
msg=$(timeout 30 "$tutti" bench --remote "$uri" --model tiny --tokens 2048 --remote-timeout-ms 300 2>&1)
rc=$?
set -e
[ $rc -eq 2 ] && grep -q "no Redis Cluster node answered" <<<"$msg" || fail "without a cluster: rc $rc, '$msg'"
grep -q "is not host:port" <<<"$("$tutti" bench --remote "redis://nohost" 2>&1)" || fail "a bad URI"
echo "ok   no cluster, or a bad URI: a clear error"
