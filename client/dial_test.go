package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"lockcell/client"
)

// refusingAddrs returns n loopback addresses where nothing listens: each
// was a real listener's, closed again, so connecting is refused.
func refusingAddrs(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		ln.Close()
	}
	return addrs
}

// silentListener accepts connections and never answers on them: a replica
// that is up but hung, which must not count as refusing.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// With every replica refusing the connection, Dial fails with
// ErrAllRefused, naming the addresses, long before RetryTimeout.
func TestDialAllRefused(t *testing.T) {
	addrs := refusingAddrs(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err := client.Dial(ctx, client.Config{Cell: "t", Replicas: addrs, RetryTimeout: time.Minute})
	took := time.Since(start)
	if !errors.Is(err, client.ErrAllRefused) {
		t.Fatalf("Dial with nothing listening: %v, want ErrAllRefused", err)
	}
	if errors.Is(err, client.ErrNoMaster) {
		t.Fatalf("Dial: %v also matches ErrNoMaster", err)
	}
	for _, a := range addrs {
		if !strings.Contains(err.Error(), a) {
			t.Fatalf("Dial error %q does not name %s", err, a)
		}
	}
	// RetryTimeout is a minute: anything near it means no short cut.
	if took > 20*time.Second {
		t.Fatalf("Dial took %v to find every replica refusing", took)
	}
	t.Logf("ErrAllRefused after %v: %v", took, err)
}

// A replica that accepts the connection but never answers is not a
// refusal: Dial keeps retrying until RetryTimeout and fails with
// ErrNoMaster, as before.
func TestDialSomeRefusedKeepsRetrying(t *testing.T) {
	addrs := append(refusingAddrs(t, 2), silentListener(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := client.Dial(ctx, client.Config{Cell: "t", Replicas: addrs, RetryTimeout: 2 * time.Second,
		DialTimeout: 300 * time.Millisecond})
	if errors.Is(err, client.ErrAllRefused) || !errors.Is(err, client.ErrNoMaster) {
		t.Fatalf("Dial with one replica up but silent: %v, want ErrNoMaster and not ErrAllRefused", err)
	}
}
