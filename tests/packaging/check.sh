#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds tutti's packages with CPack from a build directory and checks what they hold: the
# .deb files (always; lintian finds neither errors nor warnings, where it is installed) and the
# .rpm files (where rpmbuild exists; rpmlint the same). The debs are unpacked into a scratch
# root, and a program, `import tutti` and every sample are built and run against them, as a
# user would against installed packages: usable, not just present.
#   tests/packaging/check.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
out=$build/packages
rm -rf "$out" && mkdir -p "$out"
fail() { echo "FAIL $*"; exit 1; }

(cd "$build" && cpack -G DEB -B "$out" >"$out/cpack-deb.log" 2>&1) || { tail -20 "$out/cpack-deb.log"; fail "cpack -G DEB"; }
ver=$(sed -n 's/^project(tutti VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
major=${ver%%.*}
debs=("libtutti${major}_${ver}_amd64.deb" "libtutti-dev_${ver}_amd64.deb" "tutti-tools_${ver}_amd64.deb" "tutti-dkms_${ver}_all.deb")
python=""  # python3-tutti, where the build has the Python binding
if grep -q "^TUTTI_PYTHON_VERSION:INTERNAL=" "$build/CMakeCache.txt"; then python="python3-tutti_${ver}_amd64.deb"; debs+=("$python"); fi
for p in "${debs[@]}"; do
  [ -f "$out/$p" ] || fail "no $p (made: $(cd "$out" && ls ./*.deb | tr '\n' ' '))"
done
echo "ok   debs: $(cd "$out" && ls ./*.deb | xargs -n1 basename | tr '\n' ' ')"
has() {  # package, path
  dpkg-deb -c "$out/$1" >"$out/$1.list"
  grep -qE " \./usr/$2( -> .*)?\$" "$out/$1.list" || fail "$1 lacks /usr/$2"
}
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt")  # lib, or lib/<multiarch>
has "libtutti${major}_${ver}_amd64.deb" "$libdir/libtutti.so.$major"
has "libtutti${major}_${ver}_amd64.deb" "share/doc/libtutti$major/copyright"
has "tutti-tools_${ver}_amd64.deb" "bin/tutti"
has "tutti-tools_${ver}_amd64.deb" "share/bash-completion/completions/tutti"
for page in tutti tutti-info tutti-bench tutti-stats tutti-fsck; do has "tutti-tools_${ver}_amd64.deb" "share/man/man1/$page.1.gz"; done
has "libtutti-dev_${ver}_amd64.deb" "share/man/man3/tutti.h.3.gz"
for fn in $(sed -n 's/^\(tutti_[a-z_]*\)@@.*/\1/p' "$src/lib/capi/abi.txt"); do has "libtutti-dev_${ver}_amd64.deb" "share/man/man3/$fn.3.gz"; done
has "libtutti-dev_${ver}_amd64.deb" "share/tutti/tutti_c.i"
[ -z "$python" ] || has "$python" "lib/python3/dist-packages/tutti/__init__.py"
has "libtutti-dev_${ver}_amd64.deb" "include/tutti.h"
has "libtutti-dev_${ver}_amd64.deb" "$libdir/pkgconfig/tutti.pc"
has "libtutti-dev_${ver}_amd64.deb" "$libdir/cmake/tutti/tuttiConfig.cmake"
has "tutti-dkms_${ver}_all.deb" "src/tutti-$ver/dkms.conf"
has "tutti-dkms_${ver}_all.deb" "src/tutti-$ver/uapi/tutti_kmod.h"
deps=$(dpkg-deb -f "$out/libtutti${major}_${ver}_amd64.deb" Depends)
grep -q liburing <<<"$deps" || fail "libtutti$major does not depend on liburing: '$deps'"
# (never `cmd | grep -q` under pipefail: grep may leave before cmd has written all, and cmd's
# SIGPIPE then fails the pipe)
grep -q "libtutti$major (= $ver)" <<<"$(dpkg-deb -f "$out/libtutti-dev_${ver}_amd64.deb" Depends)" || fail "libtutti-dev's Depends"
grep -q dkms <<<"$(dpkg-deb -f "$out/tutti-dkms_${ver}_all.deb" Depends)" || fail "tutti-dkms's Depends"
grep -q symbols <<<"$(dpkg-deb --ctrl-tarfile "$out/libtutti${major}_${ver}_amd64.deb" | tar -t)" || fail "libtutti$major has no symbols file"
echo "ok   contents and dependencies (libtutti$major: $deps)"
if command -v lintian >/dev/null; then
  for p in "${debs[@]}"; do
    lintian --fail-on error,warning "$out/$p" >"$out/$p.lintian" 2>&1 || { cat "$out/$p.lintian"; fail "lintian on $p"; }
  done
  echo "ok   lintian: no errors, no warnings"
else
  echo "skip lintian is not installed here (Debian: apt-get install lintian)"
fi

# Unpacked into a scratch root, the packages build and run a program.
root=$out/root
for p in "$out"/libtutti*.deb "$out"/tutti-tools*.deb "$out"/python3-tutti*.deb; do [ -e "$p" ] && dpkg-deb -x "$p" "$root"; done
cat >"$out/hello.c" <<'C'
#include <stdio.h>
#include <tutti.h>
int main(void) {
  printf("%s\n", tutti_version_string());
  return tutti_version_number() == TUTTI_VERSION_NUMBER ? 0 : 1;
}
C
export PKG_CONFIG_LIBDIR=$root/usr/$libdir/pkgconfig  # tutti.pc finds its prefix from where it lies
gcc -o "$out/hello" "$out/hello.c" $(pkg-config --cflags --libs tutti) || fail "compile against the packaged header and library"
got=$(LD_LIBRARY_PATH=$root/usr/$libdir "$out/hello") || fail "run against the packaged library"
[ "$got" = "$ver" ] || fail "the packaged library says version '$got', not $ver"
grep -q "$ver" <<<"$(LD_LIBRARY_PATH=$root/usr/$libdir "$root/usr/bin/tutti" --version)" || fail "packaged tutti --version"
echo "ok   a program built with pkg-config against the unpacked packages runs: $got"
if [ -n "$python" ]; then  # the interpreter the module was built for (the cache names it)
  py=$(sed -n 's/^_\?Python3_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt" | head -1)
  got=$(cd "$out" && PYTHONPATH=$root/usr/lib/python3/dist-packages LD_LIBRARY_PATH=$root/usr/$libdir \
        "${py:-python3}" -c 'import tutti; print(tutti.version())') || fail "import tutti from the unpacked python3-tutti"
  [ "$got" = "$ver" ] || fail "the packaged Python module says version '$got', not $ver"
  echo "ok   import tutti from the unpacked python3-tutti: $got"
fi

# Every sample, built the way a user builds it against the installed packages (here unpacked:
# pkg-config and CMake find them through the relocatable tutti.pc and tuttiConfig.cmake).
export LD_LIBRARY_PATH=$root/usr/$libdir
gcc -o "$out/sample_c" "$src/samples/c/roundtrip.c" $(pkg-config --cflags --libs tutti) && "$out/sample_c" >/dev/null ||
  fail "the C sample against the packages"
g++ -std=c++20 -o "$out/sample_cpp" "$src/samples/cpp/roundtrip.cpp" $(pkg-config --cflags --libs tutti) &&
  "$out/sample_cpp" >/dev/null || fail "the C++ sample against the packages"
mkdir -p "$out/cmake-user"
cat >"$out/cmake-user/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.22)
project(user C)
find_package(tutti $ver REQUIRED)
add_executable(sample_c $src/samples/c/roundtrip.c)
target_link_libraries(sample_c PRIVATE tutti::tutti)
CM
{ cmake -S "$out/cmake-user" -B "$out/cmake-user/build" -DCMAKE_PREFIX_PATH="$root/usr" >/dev/null &&
  cmake --build "$out/cmake-user/build" >/dev/null && "$out/cmake-user/build/sample_c" >/dev/null; } ||
  fail "the C sample through find_package(tutti) against the packages"
samples="c, c++, c through CMake"
if [ -n "$python" ]; then
  PYTHONPATH=$root/usr/lib/python3/dist-packages "${py:-python3}" "$src/samples/python/roundtrip.py" >/dev/null ||
    fail "the Python sample against the packages"
  samples+=", python"
fi
if command -v go >/dev/null; then
  (cd "$src/samples/go" && GOFLAGS=-mod=mod GOPROXY=off GOCACHE=$out/go-cache GOPATH=$out/go-path go run . >/dev/null) ||
    fail "the Go sample (#cgo pkg-config: tutti) against the packages"
  samples+=", go"
fi
if command -v cargo >/dev/null && command -v bindgen >/dev/null; then  # tutti-sys runs bindgen on the packaged header
  (cd "$src/samples/rust" && CARGO_TARGET_DIR=$out/cargo cargo run --offline --locked --quiet >/dev/null 2>"$out/cargo.log") ||
    { cat "$out/cargo.log"; fail "the Rust sample (tutti-sys through pkg-config) against the packages"; }
  samples+=", rust"
fi
unset LD_LIBRARY_PATH
echo "ok   samples built and run against the unpacked packages: $samples"

# The DKMS source package is complete: its sources build the module the way dkms.conf says.
kver=$(ls /lib/modules 2>/dev/null | sort -V | tail -1)
if [ -n "$kver" ] && [ -d "/lib/modules/$kver/build" ]; then
  dpkg-deb -x "$out/tutti-dkms_${ver}_all.deb" "$out/kmod-root"
  ksrc=$out/kmod-root/usr/src/tutti-$ver
  make -s -C "/lib/modules/$kver/build" M="$ksrc" modules 2>&1 | grep -v "Skipping BTF" || true
  [ -f "$ksrc/tutti_kmod.ko" ] || fail "the packaged module source does not build against $kver"
  grep -q 'BUILT_MODULE_NAME\[0\]="tutti_kmod"' "$ksrc/dkms.conf" || fail "dkms.conf names another module"
  echo "ok   the packaged module source builds against $kver, as dkms.conf does it"
else
  echo "skip no kernel headers here: the packaged module source is not built"
fi

if command -v rpmbuild >/dev/null; then
  (cd "$build" && cpack -G RPM -B "$out" >"$out/cpack-rpm.log" 2>&1) || { tail -20 "$out/cpack-rpm.log"; fail "cpack -G RPM"; }
  for p in libtutti libtutti-devel tutti-tools tutti-dkms; do
    f=$(ls "$out"/$p-"$ver"-*.rpm 2>/dev/null | head -1)
    [ -n "$f" ] || fail "no $p rpm"
  done
  rpmhas() {  # package, path
    rpm -qlp "$out/$1"-"$ver"-*.rpm >"$out/$1.rpmlist" 2>/dev/null
    grep -q "$2" "$out/$1.rpmlist" || fail "$1 rpm lacks $2"
  }
  rpmhas tutti-tools /usr/bin/tutti
  rpmhas libtutti "libtutti.so.$major"
  rpmhas libtutti-devel /usr/include/tutti.h
  rpmhas tutti-dkms dkms.conf
  rpmhas tutti-tools /usr/share/man/man1/tutti.1.gz
  for p in libtutti libtutti-devel tutti-tools tutti-dkms; do
    want=Apache-2.0; [ $p = tutti-dkms ] && want=GPL-2.0-only
    got=$(rpm -qp --qf '%{LICENSE}' "$out/$p"-"$ver"-*.rpm 2>/dev/null)
    [ "$got" = "$want" ] || fail "$p rpm's License is '$got', not $want"
  done
  echo "ok   rpms: $(cd "$out" && ls ./*.rpm | xargs -n1 basename | tr '\n' ' ')"
  if command -v rpmlint >/dev/null; then
    rpmlint -c "$src/packaging/rpmlint.toml" "$out"/*.rpm >"$out/rpmlint.log" 2>&1 || { cat "$out/rpmlint.log"; fail "rpmlint"; }
    grep -q " 0 errors, 0 warnings" "$out/rpmlint.log" || { cat "$out/rpmlint.log"; fail "rpmlint: errors or warnings"; }
    echo "ok   rpmlint (packaging/rpmlint.toml): no errors, no warnings"
  else
    echo "skip rpmlint is not installed here (Debian: apt-get install rpmlint)"
  fi
else
  echo "skip rpmbuild is not installed here: no RPMs (Debian: apt-get install rpm)"
fi
echo "PASS"
