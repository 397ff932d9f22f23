#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# libtutti.so exports exactly the symbols, at exactly the versions, that lib/capi/abi.txt lists,
# and every function tutti.h declares is among them.
#   check.sh NM LIBTUTTI ABI_LIST TUTTI_H
set -euo pipefail
nm=$1 lib=$2 list=$3 header=$4
export LC_ALL=C

listed=$(grep -vE '^(#|$)' "$list" | sort)
# name@@VERSION of each defined dynamic symbol; the version nodes themselves (type A) are no calls.
exported=$("$nm" -D --defined-only "$lib" | awk 'NF == 3 && $2 != "A" { print $3 }' | sort)
declared=$(sed -nE 's/^TUTTI_API[^(]*[ *](tutti_[a-z0-9_]+)\(.*/\1/p' "$header" | sort)

status=0
if [ "$exported" != "$listed" ]; then
  echo "$lib exports other symbols than $list lists:"
  echo "  - listed, not exported as listed: removed or moved to another version node, an ABI break"
  echo "  + exported, not listed: add it on purpose, to the newest node of tutti.map and to the list"
  diff -U0 <(echo "$listed") <(echo "$exported") | grep -E '^[-+]tutti' | sed 's/^/    /' || true
  status=1
fi
missing=$(comm -23 <(echo "$declared") <(echo "$exported" | sed 's/@.*//' | sort))
if [ -n "$missing" ]; then
  echo "declared in $header but not exported (name them in tutti.map):"
  echo "$missing" | sed 's/^/    /'
  status=1
fi
[ "$status" = 0 ] && echo "$(echo "$exported" | wc -l) symbols exported, as listed"
exit "$status"
