#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The debs installed with apt on this machine, then used as a user would, from a clean
# environment that knows nothing of the build tree: pkg-config, man, the tutti tool,
# `import tutti`, and the C, CMake, Rust and Go samples built against /usr. The packages are
# purged again at the end, whatever happened.
#   TUTTI_TEST_APT=1 tests/packaging/installed.sh BUILD_DIR
# It installs into /, so it runs only where asked to (TUTTI_TEST_APT=1: .ci/run sets it on its
# fresh Debian machine) and as root; otherwise it skips (exit 77). It takes the debs that the
# packages test left in BUILD_DIR/packages. tutti-dkms is left out: installing it builds the
# module for the running kernel, whose headers a CI machine need not have (the packages test
# builds its sources against the installed headers instead).
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
[ "${TUTTI_TEST_APT:-0}" = 1 ] || { echo "skip: installs tutti's debs into / with apt; set TUTTI_TEST_APT=1 to allow it"; exit 77; }
[ "$(id -u)" -eq 0 ] || { echo "skip: apt needs root"; exit 77; }
fail() { echo "FAIL $*"; exit 1; }

out=$build/packages
ver=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
major=${ver%%.*}
names=("libtutti$major" libtutti-dev tutti-tools)
grep -q "^TUTTI_PYTHON_VERSION:INTERNAL=" "$build/CMakeCache.txt" && names+=(python3-tutti)
debs=()
for n in "${names[@]}"; do
  if dpkg-query -W -f '${Status}' "$n" 2>/dev/null | grep -q "ok installed"; then
    echo "skip: $n is installed here already; this test installs and purges its own"
    exit 77
  fi
  f=$(ls "$out/${n}_${ver}_"*.deb 2>/dev/null | head -1)
  [ -n "$f" ] || fail "no $n deb in $out (the packages test makes them)"
  debs+=("$f")
done

work=$(mktemp -d)
cleanup() {
  DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "${names[@]}" >"$work/purge.log" 2>&1 || cat "$work/purge.log"
  rm -rf "$work"
}
trap cleanup EXIT
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${debs[@]}" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "apt-get install of ${names[*]}"; }
echo "ok   apt-get install ${names[*]}"

# A user's shell: nothing of the build tree in its environment, its own home, its own directory.
user() { (cd "$work" && env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$work" LANG=C.UTF-8 "$@"); }
# tutti.pc is relocatable (its prefix is found from where it lies), so its -L spells the system
# directory through pkgconfig/../../..: it must name the directory the library is in.
libs=$(user pkg-config --libs tutti)
[ "$(awk "{print \$NF}" <<<"$libs")" = "-ltutti" ] || fail "pkg-config --libs tutti says '$libs'"
for f in $libs; do
  [ "${f#-L}" = "$f" ] || [ -e "$(realpath -m "${f#-L}")/libtutti.so" ] || fail "pkg-config --libs names ${f#-L}, where no libtutti.so is"
done
[ "$(user pkg-config --modversion tutti)" = "$ver" ] || fail "pkg-config --modversion tutti"
grep -q "^tutti $ver\$" <<<"$(user tutti --version)" || fail "tutti --version"
for page in tutti tutti-fsck tutti.h tutti_batch_wait_layer_async; do
  user man -w "$page" >/dev/null 2>&1 || fail "man -w $page"
  grep -q "tutti" <<<"$(user man -P cat "$page" 2>/dev/null)" || fail "man $page shows nothing"
done
echo "ok   pkg-config, tutti --version, man tutti, man tutti_batch_wait_layer_async"

if [[ " ${names[*]} " == *" python3-tutti "* ]]; then
  [ "$(user python3 -c 'import tutti; print(tutti.version())')" = "$ver" ] || fail "import tutti"
  user python3 "$src/samples/python/roundtrip.py" >/dev/null || fail "the Python sample"
  echo "ok   import tutti, and the Python sample"
fi

user gcc -o "$work/sample_c" "$src/samples/c/roundtrip.c" -ltutti || fail "gcc ... -ltutti"
user sh -c "gcc -o '$work/sample_pc' '$src/samples/c/roundtrip.c' \$(pkg-config --cflags --libs tutti)" ||
  fail "gcc ... \$(pkg-config --cflags --libs tutti)"
user "$work/sample_pc" >/dev/null || fail "the C sample built with pkg-config"
user "$work/sample_c" >/dev/null || fail "the C sample"
mkdir -p "$work/cmake-user"
cat >"$work/cmake-user/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.22)
project(user C)
find_package(tutti $ver REQUIRED)
add_executable(sample_c $src/samples/c/roundtrip.c)
target_link_libraries(sample_c PRIVATE tutti::tutti)
CM
{ user cmake -S "$work/cmake-user" -B "$work/cmake-user/build" >/dev/null &&
  user cmake --build "$work/cmake-user/build" >/dev/null && user "$work/cmake-user/build/sample_c" >/dev/null; } ||
  fail "the C sample through find_package(tutti)"
echo "ok   the C sample, with -ltutti, with pkg-config and with find_package(tutti)"

if command -v cargo >/dev/null; then
  (cd "$src/samples/rust" && env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$work" CARGO_TARGET_DIR="$work/cargo" \
     cargo build --offline --locked --quiet 2>"$work/cargo.log") || { cat "$work/cargo.log"; fail "cargo build of the Rust sample"; }
  user "$work/cargo/debug/tutti-sample" >/dev/null || fail "the Rust sample"
  echo "ok   cargo build of the Rust sample (tutti-sys through pkg-config), and it runs"
else
  echo "skip cargo is not installed here"
fi
if command -v go >/dev/null; then
  (cd "$src/samples/go" && env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$work" GOFLAGS=-mod=mod GOPROXY=off \
     GOCACHE="$work/go-cache" GOPATH="$work/go-path" go run . >/dev/null 2>"$work/go.log") ||
    { cat "$work/go.log"; fail "go run of the Go sample"; }
  echo "ok   go run of the Go sample (#cgo pkg-config: tutti)"
else
  echo "skip go is not installed here"
fi
