// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"syscall"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Images of the real-node lane, built here without Docker or a registry:
// one layer of files from the tools cache, written as a docker-archive
// that `ctr images import` loads into a node's containerd. Their names say
// they are local builds, not the upstream images.
const (
	// PauseImage is each node's sandbox image: Kubernetes' pause.c.
	PauseImage = "lab.ipkeeper.test/pause:v1.34.2"
	// BusyboxImage runs the lane's test pods: Debian's busybox-static.
	BusyboxImage = "lab.ipkeeper.test/busybox:1.35"
	// MultusImage holds Multus' thin plugin and its DaemonSet's
	// entrypoints, laid out as Multus' own image lays them out.
	MultusImage = "lab.ipkeeper.test/multus-cni:v4.2.3"
)

// imageFile is one file of an image layer: content from a host file, or
// a symbolic link.
type imageFile struct {
	from     string // host file to copy
	link     string // symlink target
	dir      bool
	mode     int64
	uid, gid int
	content  []byte
	// capability is the file capability (security.capability) the
	// runtime sets when it unpacks the layer.
	capability []byte
}

// netBindService is the file capability cap_net_bind_service=ep
// (struct vfs_cap_data, revision 2: magic with the effective flag, then
// the permitted and inheritable sets, low word first).
// CAP_NET_BIND_SERVICE is bit 10: 0x400.
var netBindService = []byte{0x01, 0, 0, 0x02, 0x00, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

// treeFiles adds the regular files, directories and symbolic links under
// the host directory root to files, at prefix in the image, with their
// modes and owners; devices, sockets and pipes are left out (the runtime
// makes /dev). A later call's files replace an earlier one's.
func treeFiles(files map[string]imageFile, root, prefix string) error {
	return filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, _ := info.Sys().(*syscall.Stat_t)
		f := imageFile{mode: int64(info.Mode().Perm() | info.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky))}
		if st != nil {
			f.uid, f.gid = int(st.Uid), int(st.Gid)
		}
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			if f.link, err = os.Readlink(p); err != nil {
				return err
			}
		case info.IsDir():
			f.dir = true
		case info.Mode().IsRegular():
			f.from = p
		default:
			return nil
		}
		files[path.Join(prefix, filepath.ToSlash(rel))] = f
		return nil
	})
}

// writeImageArchive writes a one-layer image named ref with files (path in
// the image -> file) and entrypoint to archive.
func writeImageArchive(archive, ref string, files map[string]imageFile, entrypoint []string) error {
	return writeImageArchiveTags(archive, []string{ref}, files, entrypoint)
}

// writeImageArchiveTags is writeImageArchive for one image under several
// names.
func writeImageArchiveTags(archive string, refs []string, files map[string]imageFile, entrypoint []string) error {
	ref := refs[0]
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	dirs := map[string]bool{}
	for _, p := range paths {
		for d := path.Dir(p); d != "." && d != "/" && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	dirList := make([]string, 0, len(dirs))
	for d := range dirs {
		if _, listed := files[d]; !listed {
			dirList = append(dirList, d)
		}
	}
	sort.Strings(dirList)
	for _, d := range dirList {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: 0o755}); err != nil {
			return err
		}
	}
	for _, p := range paths {
		f := files[p]
		if f.dir {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p[1:] + "/", Mode: f.mode, Uid: f.uid, Gid: f.gid}); err != nil {
				return err
			}
			continue
		}
		if f.link != "" {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: p[1:], Linkname: f.link, Mode: 0o777, Uid: f.uid, Gid: f.gid}); err != nil {
				return err
			}
			continue
		}
		data := f.content
		if f.from != "" {
			var err error
			if data, err = os.ReadFile(f.from); err != nil {
				return fmt.Errorf("image %s: %w", ref, err)
			}
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: p[1:], Mode: f.mode, Uid: f.uid, Gid: f.gid, Size: int64(len(data))}
		if f.capability != nil {
			h.Format = tar.FormatPAX
			h.PAXRecords = map[string]string{"SCHILY.xattr.security.capability": string(f.capability)}
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerBytes := buf.Bytes()
	// The fastest compression: the archive only crosses this machine.
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerBytes)), nil },
		tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config = v1.Config{Entrypoint: entrypoint, Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	tags := map[name.Reference]v1.Image{}
	for _, r := range refs {
		tag, err := name.NewTag(r)
		if err != nil {
			return err
		}
		tags[tag] = img
	}
	return tarball.MultiRefWriteToFile(archive, tags)
}

// KubeVirt's node images: virt-launcher's as KubeVirt lays it out (the
// launcher rootfs from Debian packages, KubeVirt's files from the module
// over it, its programs in /usr/bin), which also serves as virt-handler's
// (virt-handler and virt-chroot in /usr/bin): one image, two names.
const (
	KubeVirtImageRegistry = "lab.ipkeeper.test"
	KubeVirtImageTag      = "v1.8.2"
	LauncherImage         = KubeVirtImageRegistry + "/virt-launcher:" + KubeVirtImageTag
	HandlerImage          = KubeVirtImageRegistry + "/virt-handler:" + KubeVirtImageTag
)

// kubeVirtPrograms are the programs of KubeVirt's launcher and handler
// images that hack/tools.sh kubevirt-node builds.
var kubeVirtPrograms = []string{"virt-launcher", "virt-launcher-monitor", "virt-probe", "virt-tail", "virt-freezer",
	"libvirt-hook-client", "container-disk", "virt-handler", "virt-chroot"}

// writeKubeVirtImage writes the launcher and handler image's archive.
func writeKubeVirtImage(tools *Tools, archive string) error {
	files := map[string]imageFile{}
	if err := treeFiles(files, tools.LauncherRootfs, "/"); err != nil {
		return fmt.Errorf("the launcher rootfs (hack/tools.sh launcher-rootfs): %w", err)
	}
	if err := treeFiles(files, filepath.Join(tools.KubeVirtNodeDir, "launcher-files"), "/"); err != nil {
		return fmt.Errorf("KubeVirt's launcher files (hack/tools.sh kubevirt-node): %w", err)
	}
	for _, p := range kubeVirtPrograms {
		files["/usr/bin/"+p] = imageFile{from: filepath.Join(tools.KubeVirtNodeDir, p), mode: 0o755}
	}
	// As KubeVirt's image: a non-root launcher (every migration target's,
	// whatever the source's) starts virt-launcher and virtqemud with the
	// ambient capability NET_BIND_SERVICE (its DHCP server's port), which
	// only a permitted capability can raise; QEMU gets it the same way.
	for _, p := range []string{"/usr/bin/virt-launcher-monitor", "/usr/bin/qemu-system-x86_64"} {
		f, ok := files[p]
		if !ok {
			return fmt.Errorf("the launcher image has no %s", p)
		}
		f.capability = netBindService
		files[p] = f
	}
	return writeImageArchiveTags(archive, []string{LauncherImage, HandlerImage}, files, []string{"/usr/bin/virt-launcher"})
}

// busyboxApplets are the commands the lane's pods run.
var busyboxApplets = []string{"sh", "ip", "sleep", "cat", "ls", "ping", "nc", "wget", "ifconfig", "udhcpc", "echo", "kill", "ps", "grep", "true"}

// writeNodeImages writes the lane's base images into dir and returns
// their archives.
func writeNodeImages(tools *Tools, dir string) ([]string, error) {
	busybox := map[string]imageFile{"/bin/busybox": {from: path.Join(tools.NodeImagesDir, "busybox"), mode: 0o755}}
	for _, a := range busyboxApplets {
		busybox["/bin/"+a] = imageFile{link: "busybox"}
	}
	multusDir := path.Dir(tools.MultusThinEntrypoint)
	images := []struct {
		file, ref  string
		files      map[string]imageFile
		entrypoint []string
	}{
		{"pause.tar", PauseImage, map[string]imageFile{"/pause": {from: path.Join(tools.NodeImagesDir, "pause"), mode: 0o755}}, []string{"/pause"}},
		{"busybox.tar", BusyboxImage, busybox, []string{"/bin/sh"}},
		{"multus.tar", MultusImage, map[string]imageFile{
			"/thin_entrypoint":                 {from: tools.MultusThinEntrypoint, mode: 0o755},
			"/install_multus":                  {from: path.Join(multusDir, "install_multus"), mode: 0o755},
			"/usr/src/multus-cni/bin/multus":   {from: tools.Multus, mode: 0o755},
			"/usr/src/multus-cni/bin/passthru": {from: path.Join(multusDir, "passthru"), mode: 0o755},
		}, []string{"/thin_entrypoint"}},
	}
	var out []string
	for _, im := range images {
		archive := path.Join(dir, im.file)
		if err := writeImageArchive(archive, im.ref, im.files, im.entrypoint); err != nil {
			return nil, fmt.Errorf("building image %s: %w", im.ref, err)
		}
		out = append(out, archive)
	}
	return out, nil
}
