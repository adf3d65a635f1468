// SPDX-License-Identifier: Apache-2.0

package certs

import (
	"bytes"
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestServerCachesParsedCertificate(t *testing.T) {
	e := newEnv(t, nil, newWHC(1))
	e.reconcile()
	s := &Server{Reader: e.c, Namespace: testNS, Name: testSecret}

	if err := s.Ready(nil); err != nil {
		t.Fatalf("Ready with a valid secret: %v", err)
	}
	first, err := s.GetCertificate(nil)
	if err != nil {
		t.Fatalf("GetCertificate: %v", err)
	}
	if !bytes.Equal(first.Leaf.Raw, leafOf(t, e.secret()).Raw) {
		t.Fatal("served certificate is not tls.crt")
	}
	second, err := s.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if second != first || s.parses != 1 {
		t.Fatalf("unchanged secret re-parsed (parses=%d, same pointer=%v)", s.parses, second == first)
	}

	// Rotate the serving certificate: the next handshake picks it up.
	e.clock.Advance(300 * day)
	e.reconcile()
	third, err := s.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if third == first || s.parses != 2 {
		t.Fatalf("changed secret not re-parsed (parses=%d)", s.parses)
	}
	if !bytes.Equal(third.Leaf.Raw, leafOf(t, e.secret()).Raw) {
		t.Error("served certificate is not the rotated tls.crt")
	}
}

func TestServerKeepsLastGoodCertificate(t *testing.T) {
	e := newEnv(t, nil, newWHC(1))
	e.reconcile()
	s := &Server{Reader: e.c, Namespace: testNS, Name: testSecret}
	good, err := s.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}

	sec := e.secret()
	sec.Data[TLSCertKey] = []byte("garbage")
	e.update(sec)
	got, err := s.GetCertificate(nil)
	if err != nil || got != good {
		t.Fatalf("damaged secret: got (%p, %v), want the last good certificate %p", got, err, good)
	}
	if s.parses != 2 {
		t.Errorf("parses = %d, want 2 (the damaged version parsed once)", s.parses)
	}
	if _, err := s.GetCertificate(nil); err != nil || s.parses != 2 {
		t.Errorf("damaged version re-parsed on every handshake (parses=%d, err=%v)", s.parses, err)
	}
}

func TestServerNotReadyWithoutSecret(t *testing.T) {
	e := newEnv(t, nil)
	s := &Server{Reader: e.c, Namespace: testNS, Name: testSecret}
	if err := s.Ready(nil); err == nil {
		t.Fatal("Ready with no secret returned nil")
	}
	if c, err := s.GetCertificate(nil); err == nil || c != nil {
		t.Fatalf("GetCertificate with no secret = (%v, %v), want error", c, err)
	}

	// A Secret without usable data is not ready either.
	empty := &corev1.Secret{}
	empty.Namespace, empty.Name = testNS, testSecret
	if err := e.c.Create(context.Background(), empty); err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(nil); err == nil {
		t.Fatal("Ready with an empty secret returned nil")
	}

	// Once the leader fills it in, the replica becomes ready.
	e.reconcile()
	if err := s.Ready(nil); err != nil {
		t.Fatalf("Ready after the secret was filled in: %v", err)
	}
}

func TestServerLeafIsCurrent(t *testing.T) {
	e := newEnv(t, nil, newWHC(1))
	e.clock.t = time.Now()
	e.reconcile()
	s := &Server{Reader: e.c, Namespace: testNS, Name: testSecret}
	c, err := s.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Leaf == nil || !validAt(c.Leaf, time.Now()) {
		t.Fatal("served certificate has no Leaf or is not valid now")
	}
}
