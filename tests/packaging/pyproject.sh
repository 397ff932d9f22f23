#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python package built the usual way: pip builds bindings/python (pyproject.toml, setup.py)
# against libtutti as pkg-config finds it (this build tree's tutti-uninstalled.pc, as an
# installed libtutti-dev would be), into a scratch directory; the Python sample then runs on it.
#   tests/packaging/pyproject.sh BUILD_DIR [PYTHON]
set -euo pipefail
build=$(cd "$1" && pwd)
py=${2:-python3}
src=$(cd "$(dirname "$0")/../.." && pwd)
"$py" -c 'import setuptools, pip' 2>/dev/null || { echo "SKIP: no pip or setuptools for $py (Debian: python3-pip python3-setuptools)"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/src"  # a copy: the build writes SWIG's output next to its sources
cp -r "$src/bindings/python/"{pyproject.toml,setup.py,README.md,tutti_c.i,tutti} "$tmp/src/"
PKG_CONFIG_PATH=$build/pkgconfig "$py" -m pip install --quiet --no-build-isolation --no-deps --no-index \
  --target "$tmp/site" "$tmp/src" >"$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log"; echo "FAIL pip install"; exit 1; }
got=$(cd "$tmp" && PYTHONPATH=$tmp/site "$py" -c 'import tutti; print(tutti.__file__, tutti.version())')
case "$got" in "$tmp/site/tutti/__init__.py "*) ;; *) echo "FAIL imported another tutti: $got"; exit 1 ;; esac
(cd "$tmp" && PYTHONPATH=$tmp/site "$py" "$src/samples/python/roundtrip.py" >/dev/null) || { echo "FAIL the sample on the pip-built package"; exit 1; }
echo "ok   pip built tutti ${got##* } against pkg-config's libtutti; the Python sample runs on it"
