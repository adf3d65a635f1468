// SPDX-License-Identifier: Apache-2.0

// Package libnbd is a stub of libguestfs.org/libnbd, the cgo binding of
// libnbd, which the Go module proxy does not serve. KubeVirt's virt-launcher
// imports it only for the backup / changed-block-tracking NBD client
// (kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/storage/nbd_client.go).
// hack/tools.sh builds KubeVirt's node side with a replace directive to this
// directory. It declares only what that file uses, with the real binding's
// signatures; every call fails, so a backup or CBT request fails with an
// error naming the stub instead of talking to an NBD server. See README.md.
package libnbd

import "errors"

// ErrStub is what every function returns.
var ErrStub = errors.New("libnbd: stub (ipkeeper hack/stubs/libnbd): the NBD client is not built into this virt-launcher; backup and changed block tracking are unavailable")

// Meta contexts and block status flags, with the real binding's values.
const (
	CONTEXT_BASE_ALLOCATION   = "base:allocation"
	STATE_HOLE                = 1
	STATE_ZERO                = 2
	CONTEXT_QEMU_DIRTY_BITMAP = "qemu:dirty-bitmap:"
	STATE_DIRTY               = 1
)

// LibnbdExtent is one extent of a block status reply.
type LibnbdExtent struct {
	Length uint64
	Flags  uint64
}

// ExtentCallback64 is BlockStatus64's callback.
type ExtentCallback64 func(metacontext string, offset uint64, entries []LibnbdExtent, error *int) int

// BlockStatus64Optargs are BlockStatus64's optional arguments.
type BlockStatus64Optargs struct {
	FlagsSet bool
	Flags    uint32
}

// PreadOptargs are Pread's optional arguments.
type PreadOptargs struct {
	FlagsSet bool
	Flags    uint32
}

// Libnbd is a handle. The stub never makes one.
type Libnbd struct{}

// Create fails: there is no libnbd.
func Create() (*Libnbd, error) { return nil, ErrStub }

// Close does nothing.
func (h *Libnbd) Close() error { return nil }

func (h *Libnbd) AddMetaContext(name string) error                { return ErrStub }
func (h *Libnbd) CanMetaContext(metacontext string) (bool, error) { return false, ErrStub }
func (h *Libnbd) GetSize() (uint64, error)                        { return 0, ErrStub }
func (h *Libnbd) SetExportName(exportName string) error           { return ErrStub }
func (h *Libnbd) ConnectUnix(unixsocket string) error             { return ErrStub }

func (h *Libnbd) BlockStatus64(count uint64, offset uint64, extent64 ExtentCallback64, optargs *BlockStatus64Optargs) error {
	return ErrStub
}

func (h *Libnbd) Pread(buf []byte, offset uint64, optargs *PreadOptargs) error { return ErrStub }
