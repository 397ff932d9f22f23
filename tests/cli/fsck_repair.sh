#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# fsck finds a flipped data byte, an unreadable record and a record copied into another slot,
# exits 4; fsck --repair clears exactly those records, and fsck then passes (exit 0).
#   fsck_repair.sh TUTTI_CLI WORKDIR
set -euo pipefail
tutti=$1 dir=$2
pool=$dir/repair.pool
rm -f "$pool"
"$tutti" bench --model tiny --tokens 2048 --repeat 1 --quiet --no-baseline --backends posix --keep --pool "$pool" >/dev/null

u64() { od -An -t u8 -j "$1" -N 8 "$pool" | tr -d ' '; }
poke() { printf "$2" | dd of="$pool" bs=1 seek="$1" conv=notrunc status=none; }
spf=$(u64 88)
data=$(( ((4096 + spf * 4096 + 1048575) / 1048576) * 1048576 ))
poke $((data + 100)) '\x5a\xa5'                             # slot 0: data
poke $((4096 + 1 * 4096 + 200)) '\xff'                      # slot 1: record torn
dd if="$pool" of="$pool" bs=4096 skip=3 seek=5 count=1 conv=notrunc status=none  # slot 2's record into slot 4

set +e
"$tutti" fsck "$pool" >"$dir/fsck1.txt"; rc1=$?
"$tutti" fsck --repair "$pool" >"$dir/fsck2.txt"; rc2=$?
"$tutti" fsck "$pool" >"$dir/fsck3.txt"; rc3=$?
set -e
cat "$dir/fsck1.txt" "$dir/fsck2.txt" "$dir/fsck3.txt"
[ "$rc1" = 4 ] || { echo "fsck of a damaged pool exited $rc1, expected 4"; exit 1; }
grep -q "slot 0: layer 0 fails its checksum" "$dir/fsck1.txt"
grep -q "slot 1: record checksum mismatch" "$dir/fsck1.txt"
grep -q "slot 4: record written for another slot" "$dir/fsck1.txt"
[ "$rc2" = 0 ] || { echo "fsck --repair exited $rc2, expected 0"; exit 1; }
grep -q "repaired: cleared 3 record(s)" "$dir/fsck2.txt"
[ "$rc3" = 0 ] || { echo "fsck after --repair exited $rc3, expected 0"; exit 1; }
grep -q ", 0 bad" "$dir/fsck3.txt"
echo "fsck --repair leaves a pool fsck passes"
