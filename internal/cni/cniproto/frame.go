// SPDX-License-Identifier: Apache-2.0

package cniproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A frame is a FrameHeaderSize-byte header followed by a JSON body: a
// Request from the shim, a Response from the agent. The header is the
// 3-byte magic "ipk", the protocol version (FrameVersion) and the body's
// length as a big-endian uint32. No HTTP method starts with the magic, so
// the agent tells a frame from an HTTP request by its first bytes.
const (
	FrameMagic      = "ipk"
	FrameVersion    = 1
	FrameHeaderSize = 8
)

// FrameHeader returns the header of a body of n bytes.
func FrameHeader(n int) [FrameHeaderSize]byte {
	var h [FrameHeaderSize]byte
	copy(h[:], FrameMagic)
	h[3] = FrameVersion
	binary.BigEndian.PutUint32(h[4:], uint32(n)) //nolint:gosec // n is bounded by MaxRequestSize/MaxResponseSize by the callers
	return h
}

// IsFrame reports whether b, a connection's first bytes, starts a frame
// (of any version) rather than an HTTP request.
func IsFrame(b []byte) bool { return bytes.HasPrefix(b, []byte(FrameMagic)) }

// WriteFrame writes body as one frame in a single write.
func WriteFrame(w io.Writer, body []byte) error {
	h := FrameHeader(len(body))
	buf := make([]byte, 0, FrameHeaderSize+len(body))
	buf = append(append(buf, h[:]...), body...)
	_, err := w.Write(buf)
	return err
}

// FrameError is a header that is not a frame this side can read. Its
// message names what was received, so a wrong peer is easy to recognise.
type FrameError struct {
	Header []byte // the bytes received, at most FrameHeaderSize
	Reason string
}

func (e *FrameError) Error() string {
	return fmt.Sprintf("malformed ipkeeper frame header %q: %s", e.Header, e.Reason)
}

// ParseFrameHeader checks h (FrameHeaderSize bytes) and returns the body
// length, refusing bodies over limit.
func ParseFrameHeader(h []byte, limit int) (int, error) {
	switch {
	case len(h) < FrameHeaderSize:
		return 0, &FrameError{Header: h, Reason: fmt.Sprintf("%d bytes, want %d", len(h), FrameHeaderSize)}
	case !IsFrame(h):
		return 0, &FrameError{Header: h, Reason: fmt.Sprintf("it does not start with %q", FrameMagic)}
	case h[3] != FrameVersion:
		return 0, &FrameError{Header: h, Reason: fmt.Sprintf("protocol version %d, this side speaks version %d", h[3], FrameVersion)}
	}
	n := binary.BigEndian.Uint32(h[4:])
	if int64(n) > int64(limit) {
		return 0, &FrameTooLargeError{Size: int64(n), Limit: limit}
	}
	return int(n), nil
}

// FrameTooLargeError is a header announcing a body over the limit; the
// body is not read.
type FrameTooLargeError struct {
	Size  int64
	Limit int
}

func (e *FrameTooLargeError) Error() string {
	return fmt.Sprintf("ipkeeper frame of %d bytes exceeds the %d-byte limit", e.Size, e.Limit)
}

// ReadFrame reads one frame's body of at most limit bytes. A peer that
// hangs up mid-frame yields an error saying how much arrived, wrapping
// io.ErrUnexpectedEOF; one that hangs up before the header, io.EOF.
func ReadFrame(r io.Reader, limit int) ([]byte, error) {
	var h [FrameHeaderSize]byte
	if n, err := io.ReadFull(r, h[:]); err != nil {
		if n == 0 {
			return nil, err
		}
		return nil, fmt.Errorf("frame header cut short after %d of %d bytes: %w", n, FrameHeaderSize, err)
	}
	return readBody(r, h[:], limit)
}

func readBody(r io.Reader, h []byte, limit int) ([]byte, error) {
	size, err := ParseFrameHeader(h, limit)
	if err != nil {
		return nil, err
	}
	body := make([]byte, size)
	if n, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("frame body cut short after %d of %d bytes: %w", n, size, unexpected(err))
	}
	return body, nil
}

// unexpected turns a clean EOF in the middle of a frame into
// io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
