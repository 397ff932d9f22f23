#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every function of the C ABI (lib/capi/abi.txt) has a man page in section 3, and every page
# renders cleanly: `man tutti_batch_wait` must answer.
#   tests/docs/man_pages.sh SOURCE_DIR BUILD_DIR      exit 77 where the pages were not rendered
set -euo pipefail
src=$1 man=$2/man
[ -f "$man/tutti.h.3.gz" ] || { echo "skip: no rendered man pages (scdoc not found at configure)"; exit 77; }
fail() { echo "FAIL $*"; exit 1; }
n=0
for fn in $(sed -n 's/^\(tutti_[a-z_]*\)@@.*/\1/p' "$src/lib/capi/abi.txt"); do
  page=$man/$fn.3.gz
  [ -f "$page" ] || fail "no man page for $fn"
  if [ -L "$page" ]; then  # a function of a group: a link to the group's page
    target=$(readlink "$page")
    [ "${target#*/}" = "$target" ] && [ -f "$man/$target" ] || fail "$fn.3.gz links to '$target', not a page beside it"
    grep -qw "$fn" <<<"$(zcat "$man/$target" | sed -n '/^\.SH NAME/,/^\.SH/p')" || fail "$target does not name $fn"
    page=$man/$target
  fi
  grep -qF "$fn(" <<<"$(zcat "$page")" || fail "$fn's page has no prototype of it"
  n=$((n + 1))
done
[ "$n" -gt 30 ] || fail "only $n functions in abi.txt?"
echo "ok   $n functions, each with a page"
if command -v groff >/dev/null; then
  for page in "$man"/*.gz; do
    [ -L "$page" ] && continue
    warn=$(zcat "$page" | groff -man -Tutf8 -ww -z 2>&1) || fail "groff failed on $page"
    [ -z "$warn" ] || fail "$(basename "$page"): $warn"
  done
  echo "ok   every page renders without a warning (groff -ww)"
fi
