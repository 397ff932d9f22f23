#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0
# /init of the QEMU guest (tests/kmod/run.sh): hand the NVM subsystem's second controller to
# tutti_kmod (driver_override), load the stock nvme driver (it takes the first) and tutti_kmod,
# run the tests, unload the module, and report PASS or FAIL through the isa-debug-exit port.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo "KTEST: guest up, kernel $(uname -r), $(ls /sys/class/iommu 2>/dev/null | wc -l) IOMMU(s)"

verdict() {  # 0 = pass, 1 = fail; QEMU exits with (value << 1) | 1
  if [ "$1" = 0 ]; then echo "KTEST: PASS"; else echo "KTEST: FAIL"; fi
  printf "\\$(printf %03o "$1")" | dd of=/dev/port bs=1 seek=244 count=1 2>/dev/null
  poweroff -f
}

# NVMe controllers are PCI class 0x010802; the last one is tutti's.
tutti_bdf=$(for d in /sys/bus/pci/devices/*; do [ "$(cat "$d/class")" = 0x010802 ] && basename "$d"; done | sort | tail -1)
[ -n "$tutti_bdf" ] && echo tutti_nvme > "/sys/bus/pci/devices/$tutti_bdf/driver_override"
echo "KTEST: NVMe controllers: $(for d in /sys/bus/pci/devices/*; do [ "$(cat "$d/class")" = 0x010802 ] && basename "$d"; done | tr '\n' ' ')(tutti: $tutti_bdf)"

for m in $(cat /modules.list); do insmod "$m" 2>/dev/null || echo "KTEST: note: $m did not load"; done
for i in 1 2 3 4 5 6 7 8 9 10; do [ -e /dev/ng0n1 ] && break; sleep 0.5; done
[ -e /dev/ng0n1 ] || { echo "KTEST: FAIL: the stock nvme driver made no /dev/ng0n1"; verdict 1; }

insmod /tutti_kmod.ko || { echo "KTEST: FAIL: insmod tutti_kmod"; verdict 1; }
ls -l /dev/tutti
rc=0
driver=$(basename "$(readlink "/sys/bus/pci/devices/$tutti_bdf/driver")")
if [ "$driver" = tutti_nvme ]; then echo "ok   controller $tutti_bdf is bound to tutti_nvme"
else echo "FAIL controller $tutti_bdf is bound to '$driver', not tutti_nvme"; rc=1; fi
/kmod_test /dev/ng0n1 "TUTTI-NVME-LBA0" || rc=1

# The stock driver and the filesystem stay in service: a file on the mounted ext4, located with
# FIEMAP and read through io_uring NVMe passthrough, equals what the filesystem reads.
mkdir -p /mnt
if mount -t ext4 /dev/nvme0n1 /mnt; then
  /passthru_test /mnt/pool /dev/ng0n1 /sys/block/nvme0n1 || rc=1
  /pool_test /mnt || rc=1
  /nvme_test /mnt/pool || rc=1
  # io_uring drops its registered files asynchronously after a process exits: retry a moment.
  for i in 1 2 3 4 5 6 7 8 9 10; do umount /mnt 2>/dev/null && break; sleep 0.5; done
  grep -q " /mnt " /proc/mounts && { echo "KTEST: FAIL: umount"; rc=1; }
else
  echo "KTEST: FAIL: mount ext4"; rc=1
fi
rmmod tutti_kmod || { echo "KTEST: FAIL: rmmod tutti_kmod"; rc=1; }
[ -e /dev/tutti ] && { echo "KTEST: FAIL: /dev/tutti outlived the module"; rc=1; }
[ -e "/sys/bus/pci/devices/$tutti_bdf/driver" ] && { echo "KTEST: FAIL: $tutti_bdf still bound after rmmod"; rc=1; }
dmesg | grep -iE "tutti|BUG|WARNING|Oops" | grep -v "KTEST" | head -20
verdict $rc
