#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The CLI as scripts drive it: info, stats and fsck print one JSON document with --json; every
# command refuses an argument it does not know (exit 2) and answers --help; bench shows its
# progress as a bar on a terminal and as words when piped; info shows where each option's value
# comes from and refuses a bad TUTTI_* value; bench --backends takes exactly the names info lists.
#   args_json.sh TUTTI_CLI POOL   (POOL: a pool of 4 chunks, as cli_fsck_setup leaves it)
set -euo pipefail
tutti=$1 pool=$2
py() { python3 -c "import json, sys; d = json.load(sys.stdin); $1"; }
expect_rc() {  # expect_rc RC PATTERN CMD...: exit status RC and PATTERN in stderr
  local want=$1 pattern=$2 rc=0; shift 2
  "$@" >/dev/null 2>"$tmp" || rc=$?
  [ "$rc" = "$want" ] || { echo "'$*' exited $rc, expected $want"; cat "$tmp"; exit 1; }
  grep -q -- "$pattern" "$tmp" || { echo "'$*': no '$pattern' in:"; cat "$tmp"; exit 1; }
}
tmp=$(mktemp); trap 'rm -f "$tmp"' EXIT

"$tutti" info --json | py 'assert d["schema"] == 1 and d["version"]; assert any(b["name"] == "posix" and b["works"] for b in d["backends"])'
TUTTI_RINGS=3 "$tutti" info --json | py '
o = {x["key"]: x for x in d["options"]}
assert o["rings"]["value"] == "3" and o["rings"]["source"] == "TUTTI_RINGS", o["rings"]
assert o["queue_depth"]["source"] == "default" and o["queue_depth"]["value"] == o["queue_depth"]["default"]'
TUTTI_RINGS=3 "$tutti" info >"$tmp"  # (not piped into grep -q, which may close the pipe early)
grep -Eq '^  rings +3 +TUTTI_RINGS ' "$tmp"
rc=0; TUTTI_RINGS=zero "$tutti" info >"$tmp" || rc=$?
[ "$rc" = 2 ] && grep -q "refused: option rings" "$tmp" || { echo "a bad TUTTI_RINGS: info exited $rc"; cat "$tmp"; exit 1; }

# bench --backends: the names info lists are accepted (the run may then find one unusable here)
for b in $("$tutti" info --json | py 'print(" ".join(b["name"] for b in d["backends"]))'); do
  rc=0; "$tutti" bench --backends "$b" --tokens 0 >/dev/null 2>"$tmp" || rc=$?
  if grep -q "unknown backend" "$tmp"; then echo "bench refuses '$b', which info lists"; exit 1; fi
done
expect_rc 2 "unknown backend 'foo'" "$tutti" bench --backends posix,foo

# bench replaces the pool at --pool on every run: never a file that is not a pool, nor a device;
# numbers past their type are refused, not wrapped (a wrapped 0 once divided by zero)
echo "not a pool" >"$tmp.data"
expect_rc 2 "is not a tutti pool" "$tutti" bench --model tiny --tokens 256 --pool "$tmp.data"
grep -q "not a pool" "$tmp.data" || { echo "bench replaced a file that is not a pool"; exit 1; }
rm -f "$tmp.data"
expect_rc 2 "is not a regular file" "$tutti" bench --model tiny --tokens 256 --pool /dev/null
[ -c /dev/null ] || { echo "bench removed /dev/null"; exit 1; }
expect_rc 2 "more than 4294967295" "$tutti" bench --block-tokens 4294967296
expect_rc 2 "more than 4294967295" "$tutti" bench --repeat 4294967296
expect_rc 2 "multiple of --chunk-tokens" "$tutti" bench --requests 9223372036854775808 --chunk-tokens 2

expect_rc 2 "unknown argument '--bogus'" "$tutti" info --bogus
expect_rc 2 "unknown option '--bogus'" "$tutti" stats --bogus "$pool"
expect_rc 2 "unknown option '-x'" "$tutti" fsck -x "$pool"
expect_rc 2 "is not a tutti pool" "$tutti" fsck "$0"
# bench's progress: plain words per run when stderr is not a terminal; on one (script(1) gives
# it a pseudo-terminal), a bar redrawn in place with the percent done and the time left.
bench=("$tutti" bench --model tiny --tokens 2048 --repeat 2 --backends posix --no-baseline --pool "$tmp.pool")
"${bench[@]}" 2>"$tmp" >/dev/null
grep -q '^\[1/1\] posix object: raw write sweep\.\.\. raw write\.\.\. store\.\.\. .* verify 2/2\.\.\. ok$' "$tmp" || { echo "piped progress:"; cat "$tmp"; exit 1; }
if command -v script >/dev/null; then
  script -qec "${bench[*]} >/dev/null" /dev/null >"$tmp" 2>&1 || { echo "bench on a terminal failed"; cat "$tmp"; exit 1; }
  grep -aq '\] *[0-9]*%  ETA [0-9]*:[0-9][0-9]  \[1/1\] posix object: load 2/2' "$tmp" || { echo "no bar with ETA:"; cat -v "$tmp"; exit 1; }
  grep -aq '\[1/1\] posix object: ok' "$tmp" || { echo "no final line on the terminal:"; cat -v "$tmp"; exit 1; }
fi
rm -f "$tmp.pool"

for c in info bench stats fsck; do  # --help anywhere after a command: the usage, exit 0
  "$tutti" $c --help >"$tmp" || { echo "tutti $c --help failed"; exit 1; }
  grep -q "^usage: tutti" "$tmp" || { echo "tutti $c --help printed no usage"; exit 1; }
done

"$tutti" stats --json "$pool" | py 'assert d["schema"] == 1 and d["chunks"] == 4 and d["slots"] >= 4 and d["files"][0]["path"]'
"$tutti" fsck --json "$pool" | py 'assert d["consistent"] and d["chunks_verified"] == 4 and d["problems"] == []'
# bench --json: the run's facts first, then one row per line
bpool=$(dirname "$pool")/args-json-bench.pool
TUTTI_THREADS=3 "$tutti" bench --model tiny --tokens 512 --repeat 1 --quiet --json --no-baseline --backends posix \
  --pool "$bpool" | python3 -c '
import json, sys
lines = [json.loads(l) for l in sys.stdin]
info, rows = lines[0], lines[1:]
assert info["run_info"] and info["version"] and info["env"].get("TUTTI_THREADS") == "3" and info["machine"]["cpus"] > 0, info
assert [r["bench"] for r in rows] == ["raw-write", "store", "raw-read", "load"] and all(r["verified"] for r in rows), rows
# the raw rows name the settings the sweep found best; every row says its CPU seconds per GB
import re
for r in rows[0], rows[2]:
    assert re.fullmatch(r"(uring-\d+(KiB|MiB)-\d+x\d+|(pread|pwrite|memcpy)-\d+(KiB|MiB)-\d+)", r["io_mode"]), r
assert all(r["cpu_s_per_gb"] is not None and r["cpu_s_per_gb"] >= 0 for r in rows), rows'
echo "ok"
