// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The real-node lane's guest: Debian's cloud kernel (hack/tools.sh
// guest-kernel) and an initramfs of Debian's busybox-static with the
// kernel's virtio modules, booted by KubeVirt's kernel boot from a
// container image (spec.domain.firmware.kernelBoot). Its init asks DHCP
// for an address on each NIC, as a guest of a bridge binding does from
// virt-launcher's DHCP server, and reports what it holds on the serial
// console every few seconds (and answers on TCP 7 and streams on TCP 9):
//
//	IPKEEPER-GUEST <iface> mac=<mac> inet=<address/len>
//
// It boots to its init in seconds under emulation.
const (
	// GuestImage is the kernel boot image's name.
	GuestImage = "lab.ipkeeper.test/guest:busybox"
	// GuestKernelPath and GuestInitrdPath are where the image holds them.
	GuestKernelPath = "/boot/vmlinuz"
	GuestInitrdPath = "/boot/initrd.img"
	// GuestReportPrefix starts each of the guest's report lines.
	GuestReportPrefix = "IPKEEPER-GUEST"
	// GuestStreamPort is where the guest streams a counter, ten lines a
	// second, to the first peer that connects.
	GuestStreamPort = 9
)

const guestInit = `#!/bin/sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /run
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t devtmpfs dev /dev
/bin/busybox --install -s /bin
for m in $(cat /lib/modules/order); do insmod /lib/modules/$m.ko; done
ip link set lo up
ifaces=$(ls /sys/class/net | grep -v '^lo$')
for i in $ifaces; do
	ip link set "$i" up
	udhcpc -i "$i" -s /udhcpc.sh -b -t 30 -T 1 >/dev/null 2>&1
done
# Answer on TCP 7 with the guest's view of its addresses (a stream peer for
# reachability checks).
(while true; do ip -o addr | nc -l -p 7 >/dev/null 2>&1; done) &
# Stream a counter, ten lines a second, to whoever connects on TCP 9 (GuestStreamPort): a
# connection that must outlive a live migration.
(while true; do (i=0; while echo "$i"; do i=$((i+1)); usleep 100000; done) | nc -l -p 9 >/dev/null 2>&1; done) &
while true; do
	for i in $ifaces; do
		echo "` + GuestReportPrefix + ` $i mac=$(cat /sys/class/net/$i/address) inet=$(ip -4 -o addr show dev $i | awk '{print $4}' | head -1)" >/dev/console
	done
	sleep 3
done
`

const guestDHCPScript = `#!/bin/sh
case "$1" in
bound|renew)
	ip -4 addr flush dev "$interface"
	ip addr add "$ip/${mask:-24}" dev "$interface"
	[ -n "$router" ] && ip route replace default via "${router%% *}" dev "$interface"
	;;
esac
exit 0
`

// writeGuestImage writes the guest's kernel boot image archive.
func writeGuestImage(tools *Tools, archive string) error {
	kernel := filepath.Join(tools.GuestKernelDir, "vmlinuz")
	order, err := os.ReadFile(filepath.Join(tools.GuestKernelDir, "modules", "order"))
	if err != nil {
		return fmt.Errorf("the guest kernel (hack/tools.sh guest-kernel): %w", err)
	}
	busybox, err := os.ReadFile(filepath.Join(tools.NodeImagesDir, "busybox"))
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"init":              []byte(guestInit),
		"udhcpc.sh":         []byte(guestDHCPScript),
		"bin/busybox":       busybox,
		"lib/modules/order": order,
	}
	for _, m := range strings.Fields(string(order)) {
		ko, err := os.ReadFile(filepath.Join(tools.GuestKernelDir, "modules", m+".ko"))
		if err != nil {
			return err
		}
		files["lib/modules/"+m+".ko"] = ko
	}
	initrd, err := newcArchive(files, map[string]string{"bin/sh": "busybox"})
	if err != nil {
		return err
	}
	return writeImageArchive(archive, GuestImage, map[string]imageFile{
		GuestKernelPath: {from: kernel, mode: 0o644},
		GuestInitrdPath: {content: initrd, mode: 0o644},
	}, []string{"/bin/true"})
}

// newcArchive is a gzipped cpio archive (the kernel's newc format) of
// files (executable where they start with #! or are ELF) and symlinks.
func newcArchive(files map[string][]byte, links map[string]string) ([]byte, error) {
	var raw bytes.Buffer
	ino := 1
	entry := func(name string, mode uint32, data []byte) {
		fmt.Fprintf(&raw, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
			ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
		ino++
		raw.WriteString(name)
		raw.WriteByte(0)
		for raw.Len()%4 != 0 {
			raw.WriteByte(0)
		}
		raw.Write(data)
		for raw.Len()%4 != 0 {
			raw.WriteByte(0)
		}
	}
	dirs := map[string]bool{}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	for n := range links {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for d := filepath.Dir(n); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	var dirList []string
	for d := range dirs {
		dirList = append(dirList, d)
	}
	sort.Strings(dirList)
	for _, d := range dirList {
		entry(d, 0o040755, nil)
	}
	for _, n := range names {
		if target, ok := links[n]; ok {
			entry(n, 0o120777, []byte(target))
			continue
		}
		data := files[n]
		mode := uint32(0o100644)
		if bytes.HasPrefix(data, []byte("#!")) || bytes.HasPrefix(data, []byte("\x7fELF")) {
			mode = 0o100755
		}
		entry(n, mode, data)
	}
	entry("TRAILER!!!", 0, nil)
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	if _, err := w.Write(raw.Bytes()); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return gz.Bytes(), nil
}
