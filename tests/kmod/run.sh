#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds tutti's kernel module against Debian's kernel headers, boots that kernel in QEMU (TCG,
# no KVM) with an emulated NVM subsystem of two controllers sharing one namespace that carries an
# ext4 filesystem: the stock nvme driver takes the first controller (the filesystem is mounted
# through it), tutti_kmod the second. Then it runs the guest tests (kmod_test.c,
# passthru_test.cpp, pool_test.c, nvme_test.cpp). The guest decides pass or fail
# (isa-debug-exit); a panic or a hang is a failure, and so is an inconsistent filesystem
# afterwards (e2fsck on the host).
#   [IOMMU=1] tests/kmod/run.sh BUILD_DIR
# Needs qemu-system-x86 linux-headers-amd64 busybox-static cpio kmod e2fsprogs liburing-dev;
# fetches the kernel image .deb with apt-get download.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
# IOMMU=1: boot with an emulated Intel IOMMU (DMA addresses become IOVAs).
name=kmod-test${IOMMU:+-iommu}
out=$(mkdir -p "${1:-build}/$name" && cd "${1:-build}/$name" && pwd)
KVER=${KVER:-$(ls /lib/modules | sort -V | tail -1)}
kernel=$(mkdir -p "${1:-build}/kmod-kernel" && cd "${1:-build}/kmod-kernel" && pwd)  # shared by both runs
QEMU_TIMEOUT=${QEMU_TIMEOUT:-300}
cd "$out"

echo "== kernel $KVER"
if [ ! -e "$kernel/kimage/boot/vmlinuz-$KVER" ]; then
  (cd "$kernel" && rm -rf kimage ./*.deb &&
   { apt-get download "linux-image-$KVER" >/dev/null 2>&1 || { echo "cannot download linux-image-$KVER"; exit 1; }; } &&
   dpkg-deb -x linux-image-"$KVER"_*.deb kimage && depmod -b kimage "$KVER" && rm -f ./*.deb)
fi
kimage=$kernel/kimage

echo "== build the module and the guest programs"
# Built once for both runs (IOMMU or not), again only when a source changed.
guest=$(mkdir -p "${1:-build}/kmod-guest" && cd "${1:-build}/kmod-guest" && pwd)
if [ ! -x "$guest/pool_test" ] ||
   [ -n "$(find "$src/lib" "$src/include" "$src/kernels" "$src/kmod" "$src/tests/kmod" -newer "$guest/pool_test" -print -quit)" ]; then
  rm -rf "$guest" && mkdir -p "$guest/kmod"  # nothing stale can pass for a fresh build
  cp -r "$src/kmod/"*.c "$src/kmod/"*.h "$src/kmod/Makefile" "$src/kmod/uapi" "$guest/kmod/"
  make -s -C "$guest/kmod" KVER="$KVER" 2>&1 | grep -v "Skipping BTF" || true
  [ -f "$guest/kmod/tutti_kmod.ko" ] || { echo "module build failed"; exit 1; }
  gcc -O2 -static -Wall -Wextra -Werror -o "$guest/kmod_test" "$src/tests/kmod/kmod_test.c" -luring
  g++ -std=c++20 -O2 -static -Wall -Wextra -Werror -I"$src/lib" -I"$src/include" -I"$src" -o "$guest/passthru_test" \
    "$src/tests/kmod/passthru_test.cpp" "$src/lib/nvme/extents.cpp" "$src/lib/nvme/passthru.cpp" \
    "$src/lib/common/error.cpp" -luring
  g++ -std=c++20 -O2 -static -Wall -Wextra -Werror -I"$src/lib" -I"$src/include" -I"$src" -o "$guest/nvme_test" \
    "$src/tests/kmod/nvme_test.cpp" "$src/lib/nvme/extents.cpp" "$src/lib/nvme/queue.cpp" "$src/lib/nvme/io.cpp" "$src/lib/common/error.cpp"
  # The runtime itself, static and without CUDA, for a pool on the guest's ext4.
  lib_srcs=$(sed -n 's|^  \([a-z_]*/[a-z_]*\.cpp\).*|'"$src"'/lib/\1|p' "$src/lib/CMakeLists.txt" | tr -d ')')
  gcc -std=c11 -O2 -Wall -Wextra -Werror -I"$src/include" -c -o "$guest/pool_test.o" "$src/tests/kmod/pool_test.c"
  g++ -std=c++20 -O1 -static -w -I"$src/lib" -I"$src/include" -I"$src" -o "$guest/pool_test" "$guest/pool_test.o" \
    $lib_srcs "$src/kernels/device_stub.cpp" -luring -lxxhash -lpthread 2>&1 | grep -v "dlopen\|statically linked" || true
  [ -x "$guest/pool_test" ] || { echo "pool_test build failed"; exit 1; }
fi
modinfo "$guest/kmod/tutti_kmod.ko" | grep -E "^(vermagic|description)"

echo "== initramfs"
rm -rf root && mkdir -p root/bin root/proc root/sys root/dev root/lib
cp /bin/busybox root/bin/busybox
cp "$src/tests/kmod/init.sh" root/init && chmod +x root/init
cp "$guest/kmod/tutti_kmod.ko" "$guest/kmod_test" "$guest/passthru_test" "$guest/pool_test" "$guest/nvme_test" root/
: > root/modules.list
# nvme and ext4 for the stock path; vgem for a dma-buf that stands in for GPU memory.
for m in $(for x in nvme ext4 vgem; do modprobe -d "$kimage" -S "$KVER" --show-depends $x; done |
           awk '/^insmod/ && !seen[$2]++ {print $2}'); do
  cp "$m" root/lib/ && echo "/lib/$(basename "$m")" >> root/modules.list
done
(cd root && find . | cpio -o -H newc 2>/dev/null | gzip -1) > initramfs.cpio.gz

echo "== the namespace: LBA 0 marked, then an ext4 filesystem holding a 6 MiB file"
rm -rf fs && mkdir fs && head -c $((6 << 20)) /dev/urandom > fs/pool
rm -f nvme.img && truncate -s 256M nvme.img
mkfs.ext4 -q -F -b 4096 -E offset=0 -d fs nvme.img
printf 'TUTTI-NVME-LBA0\n' | dd of=nvme.img conv=notrunc status=none  # ext4 leaves its first 1 KiB alone

echo "== boot"
iommu_dev=() iommu_args=""
[ -n "${IOMMU:-}" ] && iommu_dev=(-device intel-iommu) iommu_args=" intel_iommu=on iommu.strict=1"
set +e
timeout "$QEMU_TIMEOUT" qemu-system-x86_64 -accel tcg -machine q35 -cpu max -smp 2 -m 1G -nographic -no-reboot \
  "${iommu_dev[@]}" -kernel "$kimage/boot/vmlinuz-$KVER" -initrd initramfs.cpio.gz \
  -append "console=ttyS0 panic=-1 quiet$iommu_args" \
  -device nvme-subsys,id=subsys0,nqn=nqn.2026-12.dev.tutti:test \
  -device nvme,serial=tutti0001,subsys=subsys0 -device nvme,serial=tutti0001,subsys=subsys0 \
  -drive file=nvme.img,if=none,id=nvm,format=raw -device nvme-ns,drive=nvm,nsid=1,shared=on \
  -device isa-debug-exit,iobase=0xf4,iosize=0x04 </dev/null > console.log 2>&1
qrc=$?
set -e
grep -E "^(ok|FAIL|skip) |^     |failure\(s\)|KTEST|BUG|WARNING|Kernel panic|tutti" console.log | grep -v "^\[" || true
fsck_ok=1
e2fsck -fn nvme.img > fsck.log 2>&1 || { fsck_ok=0; echo "FAIL e2fsck after the guest:"; cat fsck.log; }
[ $fsck_ok = 1 ] && echo "ok   e2fsck -fn: the filesystem is consistent after the guest ran"
if [ $qrc -eq 1 ] && [ $fsck_ok = 1 ] && grep -q "^KTEST: PASS" console.log; then
  echo "RESULT=PASS"
  exit 0
fi
echo "RESULT=FAIL (qemu exit $qrc: 1 = pass, 3 = guest failure, 0 = panic, 124 = hang)"
tail -40 console.log
exit 1
