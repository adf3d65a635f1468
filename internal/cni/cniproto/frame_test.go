// SPDX-License-Identifier: Apache-2.0

package cniproto

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	for _, body := range []string{"", "{}", `{"command":"ADD","config":{"name":"n"}}`, strings.Repeat("x", 70000)} {
		var buf bytes.Buffer
		if err := WriteFrame(&buf, []byte(body)); err != nil {
			t.Fatal(err)
		}
		if buf.Len() != FrameHeaderSize+len(body) || !IsFrame(buf.Bytes()) {
			t.Fatalf("frame of a %d-byte body is %d bytes: % x", len(body), buf.Len(), buf.Bytes()[:FrameHeaderSize])
		}
		got, err := ReadFrame(&buf, MaxRequestSize)
		if err != nil || string(got) != body {
			t.Fatalf("ReadFrame = %.40q, %v; want %.40q", got, err, body)
		}
		if buf.Len() != 0 {
			t.Fatalf("ReadFrame left %d bytes unread", buf.Len())
		}
	}
}

func TestReadFrameErrors(t *testing.T) {
	frame := func(body string) string {
		h := FrameHeader(len(body))
		return string(h[:]) + body
	}
	big := FrameHeader(MaxRequestSize + 1)
	tests := []struct {
		name    string
		in      string
		wantErr string
		wantIs  error
		as      any
	}{
		{"nothing", "", "EOF", io.EOF, nil},
		{"header cut short", "ipk\x01\x00", "frame header cut short after 5 of 8 bytes", io.ErrUnexpectedEOF, nil},
		{"body cut short", frame(`{"command":"ADD"}`)[:12], "frame body cut short after 4 of 17 bytes", io.ErrUnexpectedEOF, nil},
		{"HTTP", "HTTP/1.1 400 Bad Request\r\n", `malformed ipkeeper frame header "HTTP/1.1": it does not start with "ipk"`, nil, new(*FrameError)},
		{"garbage", "\x00\x01\x02\x03\x04\x05\x06\x07", `it does not start with "ipk"`, nil, new(*FrameError)},
		{"other version", "ipk\x02\x00\x00\x00\x02{}", "protocol version 2, this side speaks version 1", nil, new(*FrameError)},
		{"over the limit", string(big[:]), "ipkeeper frame of 1048577 bytes exceeds the 1048576-byte limit", nil, new(*FrameTooLargeError)},
		{"length beyond int32", "ipk\x01\xff\xff\xff\xff", "ipkeeper frame of 4294967295 bytes exceeds", nil, new(*FrameTooLargeError)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadFrame(strings.NewReader(tt.in), MaxRequestSize)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v is not %v", err, tt.wantIs)
			}
			if tt.as != nil && !errors.As(err, tt.as) {
				t.Errorf("error %v is not a %T", err, tt.as)
			}
		})
	}
}

func TestHTTPIsNotAFrame(t *testing.T) {
	for _, m := range []string{"GET ", "POST", "PUT ", "HEAD", "PRI "} {
		if IsFrame([]byte(m)) {
			t.Errorf("IsFrame(%q) = true", m)
		}
	}
}
