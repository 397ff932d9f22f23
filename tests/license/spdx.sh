#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every source file of the tree says its license in its first lines (SPDX), and says one that
# LICENSE or kmod/COPYING holds: Apache-2.0, or GPL-2.0 for the kernel module (its user-space
# interface header: either).
#   tests/license/spdx.sh [source dir]
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || { echo "SKIP: not a git checkout"; exit 77; }
bad=0
while IFS= read -r f; do
  case "$f" in
    docs/*|tests/fuzz/corpus/*|*.md|*.jsonl|*.log|*.png|*.lock|*.mod|.gitignore|LICENSE|kmod/COPYING) continue ;;
    packaging/copyright|packaging/changelog.in) continue ;;  # Debian formats without comments
    *CMakeLists.txt) ;;
    *.txt) continue ;;
  esac
  want="Apache-2.0"
  case "$f" in
    kmod/uapi/*) want="(GPL-2.0 WITH Linux-syscall-note) OR Apache-2.0" ;;  # user space includes it
    kmod/*) want="GPL-2.0" ;;
  esac
  line=$(head -3 "$f" | grep -m1 -o "SPDX-License-Identifier: .*" || true)
  case "$line" in
    "SPDX-License-Identifier: $want"*) ;;
    "") echo "$f: no SPDX-License-Identifier in its first lines"; bad=1 ;;
    *) echo "$f: $line (expected $want)"; bad=1 ;;
  esac
done < <(git ls-files)
[ "$bad" = 0 ] && echo "every source file names its license"
exit "$bad"
