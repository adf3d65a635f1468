// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path"
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
//
// The cloud-init guest (CloudInitGuestImage) is the same kernel with a
// Debian root filesystem as its initramfs (hack/tools.sh guest-rootfs):
// its init runs Debian's cloud-init, whose local stage reads the NoCloud
// disk KubeVirt makes of the VM's cloudInitNoCloud volume and renders its
// network configuration for ifupdown, then brings the interfaces up with
// ifupdown (as Debian's networking service does after cloud-init's local
// stage), and reports as the busybox guest does, with each NIC's global
// IPv6 address too:
//
//	IPKEEPER-GUEST <iface> mac=<mac> inet=<address/len> inet6=<address/len>
//
// It answers no TCP port.
const (
	// GuestImage is the kernel boot image's name.
	GuestImage = "lab.ipkeeper.test/guest:busybox"
	// CloudInitGuestImage is the cloud-init guest's kernel boot image.
	CloudInitGuestImage = "lab.ipkeeper.test/guest:cloud-init"
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

// cloudInitGuestInit is the cloud-init guest's /init: no systemd (it
// would take minutes under emulation), the two steps of a Debian boot that
// configure the network, in their order.
const cloudInitGuestInit = `#!/bin/sh
# The kernel gives init no PATH; cloud-init runs blkid, ip and the like.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmpfs /run
mkdir -p /run/network /run/lock /tmp
for m in $(cat /ipkeeper/modules/order); do /ipkeeper/busybox insmod /ipkeeper/modules/$m.ko; done
ip link set lo up
ifaces=$(ls /sys/class/net | grep -v '^lo$')
echo "` + GuestReportPrefix + `-LOG cloud-init init --local" >/dev/console
cloud-init init --local >/dev/console 2>&1
echo "` + GuestReportPrefix + `-LOG cloud-init's warnings:" >/dev/console
grep -E -A12 'WARNING|ERROR|Traceback' /var/log/cloud-init.log | tail -n 40 >/dev/console
echo "` + GuestReportPrefix + `-LOG what cloud-init rendered:" >/dev/console
cat /etc/network/interfaces.d/50-cloud-init >/dev/console 2>&1
ifup -a >/dev/console 2>&1
while true; do
	for i in $ifaces; do
		echo "` + GuestReportPrefix + ` $i mac=$(cat /sys/class/net/$i/address) inet=$(ip -4 -o addr show dev $i scope global | awk '{print $4}' | head -1) inet6=$(ip -6 -o addr show dev $i scope global | grep -v tentative | awk '{print $4}' | head -1)" >/dev/console
	done
	sleep 3
done
`

// cloudInitGuestConfig keeps cloud-init to what the guest has: the NoCloud
// disk (nothing is probed over the network) and ifupdown.
const cloudInitGuestConfig = `datasource_list: [NoCloud, None]
system_info:
  network:
    renderers: [eni]
    activators: [eni]
`

// writeGuestImage writes the guest's kernel boot image archive.
func writeGuestImage(tools *Tools, archive string) error {
	order, modules, err := guestModules(tools, "/lib/modules")
	if err != nil {
		return err
	}
	files := map[string]imageFile{
		"/init":              {content: []byte(guestInit), mode: 0o755},
		"/udhcpc.sh":         {content: []byte(guestDHCPScript), mode: 0o755},
		"/bin/busybox":       {from: filepath.Join(tools.NodeImagesDir, "busybox"), mode: 0o755},
		"/bin/sh":            {link: "busybox"},
		"/lib/modules/order": {content: order, mode: 0o644},
	}
	for p, f := range modules {
		files[p] = f
	}
	initrd, err := gzipped(newcArchive(files))
	if err != nil {
		return err
	}
	return writeImageArchive(archive, GuestImage, map[string]imageFile{
		GuestKernelPath: {from: filepath.Join(tools.GuestKernelDir, "vmlinuz"), mode: 0o644},
		GuestInitrdPath: {content: initrd, mode: 0o644},
	}, []string{"/bin/true"})
}

// writeCloudInitGuestImage writes the cloud-init guest's kernel boot image
// archive.
func writeCloudInitGuestImage(tools *Tools, archive string) error {
	initrd, err := cloudInitGuestInitrd(tools)
	if err != nil {
		return err
	}
	return writeImageArchive(archive, CloudInitGuestImage, map[string]imageFile{
		GuestKernelPath: {from: filepath.Join(tools.GuestKernelDir, "vmlinuz"), mode: 0o644},
		GuestInitrdPath: {content: initrd, mode: 0o644},
	}, []string{"/bin/true"})
}

// cloudInitGuestInitrd is the cloud-init guest's initramfs: its rootfs,
// the kernel's modules, busybox (for insmod) and its /init. Not
// compressed: the guest unpacks it faster under emulation than it would
// inflate it.
func cloudInitGuestInitrd(tools *Tools) ([]byte, error) {
	files := map[string]imageFile{}
	if err := treeFiles(files, tools.GuestRootfs, "/"); err != nil {
		return nil, fmt.Errorf("the cloud-init guest's rootfs (hack/tools.sh guest-rootfs): %w", err)
	}
	order, modules, err := guestModules(tools, "/ipkeeper/modules")
	if err != nil {
		return nil, err
	}
	for p, f := range modules {
		files[p] = f
	}
	files["/ipkeeper/modules/order"] = imageFile{content: order, mode: 0o644}
	files["/ipkeeper/busybox"] = imageFile{from: filepath.Join(tools.NodeImagesDir, "busybox"), mode: 0o755}
	files["/init"] = imageFile{content: []byte(cloudInitGuestInit), mode: 0o755}
	files["/etc/cloud/cloud.cfg.d/99-ipkeeper-lab.cfg"] = imageFile{content: []byte(cloudInitGuestConfig), mode: 0o644}
	return newcArchive(files)
}

// guestModules reads the guest kernel's modules (hack/tools.sh
// guest-kernel) as files under dir, and their load order.
func guestModules(tools *Tools, dir string) ([]byte, map[string]imageFile, error) {
	order, err := os.ReadFile(filepath.Join(tools.GuestKernelDir, "modules", "order"))
	if err != nil {
		return nil, nil, fmt.Errorf("the guest kernel (hack/tools.sh guest-kernel): %w", err)
	}
	files := map[string]imageFile{}
	for _, m := range strings.Fields(string(order)) {
		files[path.Join(dir, m+".ko")] = imageFile{from: filepath.Join(tools.GuestKernelDir, "modules", m+".ko"), mode: 0o644}
	}
	return order, files, nil
}

// newcArchive is a cpio archive (the kernel's newc format) of files (path
// -> file, as in an image layer), with the directories their paths need.
func newcArchive(files map[string]imageFile) ([]byte, error) {
	var raw bytes.Buffer
	ino := 1
	entry := func(name string, mode uint32, uid, gid int, data []byte) {
		fmt.Fprintf(&raw, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
			ino, mode, uid, gid, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
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
	all := map[string]imageFile{}
	for p, f := range files {
		p = strings.TrimPrefix(path.Clean("/"+p), "/")
		all[p] = f
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := all[d]; !ok {
				all[d] = imageFile{dir: true, mode: 0o755}
			}
		}
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	// A parent before its children.
	sort.Strings(names)
	for _, n := range names {
		f := all[n]
		mode := unixPerm(f.mode)
		switch {
		case f.dir:
			entry(n, 0o040000|mode, f.uid, f.gid, nil)
		case f.link != "":
			entry(n, 0o120777, f.uid, f.gid, []byte(f.link))
		default:
			data := f.content
			if f.from != "" {
				var err error
				if data, err = os.ReadFile(f.from); err != nil {
					return nil, err
				}
			}
			entry(n, 0o100000|mode, f.uid, f.gid, data)
		}
	}
	entry("TRAILER!!!", 0, 0, 0, nil)
	return raw.Bytes(), nil
}

// unixPerm is an imageFile's mode (permissions and Go's setuid, setgid and
// sticky bits) as the Unix mode's low 12 bits.
func unixPerm(mode int64) uint32 {
	m := uint32(mode & 0o777)
	for bit, unix := range map[os.FileMode]uint32{os.ModeSetuid: 0o4000, os.ModeSetgid: 0o2000, os.ModeSticky: 0o1000} {
		if os.FileMode(mode)&bit != 0 {
			m |= unix
		}
	}
	return m
}

// gzipped compresses an archive newcArchive made.
func gzipped(raw []byte, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	if _, err := w.Write(raw); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return gz.Bytes(), nil
}
