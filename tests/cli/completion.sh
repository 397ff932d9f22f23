#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The bash completion of tutti: subcommands, flags, and bench --backends from `tutti info --json`.
#   completion.sh TUTTI_CLI COMPLETION_FILE
set -euo pipefail
tutti=$1
# shellcheck source=/dev/null
source "$2"
complete_words() {  # complete_words WORD...: what completing the last word offers, one line
  COMP_WORDS=("$tutti" "$@"); COMP_CWORD=$#; COMPREPLY=()
  _tutti
  echo "${COMPREPLY[*]}"
}
check() {  # check WANT WORD...
  local want=$1; shift
  local got; got=$(complete_words "$@")
  [ "$got" = "$want" ] || { echo "completing '$*': got '$got', want '$want'"; exit 1; }
}
check "fsck" fs
check "stats" st
check "--json" info --j
check "--json --repair" fsck --
check "--prometheus" stats --p
check "llama3-8b llama3-70b" bench --model ll
check "posix passthru" bench --backends p
check "--hnd --help" bench --h
echo ok
