package main

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// rssKiB reads a process's resident set size from /proc.
func rssKiB(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// strangerDialer dials from 127.0.0.2, so the flood comes from another
// address than the replicas (all on 127.0.0.1), as it would on a network.
var strangerDialer = &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}

// Thousands of strangers connect to a TLS replica's Raft port: some hold
// their connection silently, some send bytes that are no TLS, some try a
// handshake without a certificate. The replica's memory stays within a
// bound while they do, its log gains a few lines, not one per connection,
// and the cell keeps serving.
func TestRaftPortFloodOfStrangers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three processes")
	}
	bin := fixtures.BuildLockcelld(t)
	set := fixtures.TestCerts(t)
	pc := fixtures.NewProcCellWith(t, bin, "flood", 3, 8*time.Second, fixtures.ProcOptions{TLS: set})
	mi := pc.MasterIndex(60 * time.Second)
	target := pc.Peers()[mi].RaftAddr
	pid := pc.PID(mi)
	rss0 := rssKiB(t, pid)
	lines0 := strings.Count(pc.Log(mi), "\n")

	const holders, garblers, strangers = 3000, 3000, 100
	var mu sync.Mutex
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	work := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				c, err := strangerDialer.Dial("tcp", target)
				if err != nil {
					continue
				}
				switch {
				case k < holders:
					mu.Lock()
					held = append(held, c)
					mu.Unlock()
				case k < holders+garblers:
					c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
					c.Close()
				default:
					tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true})
					tc.SetDeadline(time.Now().Add(5 * time.Second))
					tc.Handshake()
					tc.Close()
				}
			}
		}()
	}
	for k := range holders + garblers + strangers {
		work <- k
	}
	close(work)
	wg.Wait()
	rss1 := rssKiB(t, pid)
	growth := (rss1 - rss0) / 1024
	t.Logf("%d held, %d garbage and %d certificate-less connects: master RSS %d MiB -> %d MiB (+%d MiB)",
		holders, garblers, strangers, rss0/1024, rss1/1024, growth)
	if growth > 64 {
		t.Errorf("the master grew by %d MiB under a flood of unauthenticated Raft connections, want at most 64", growth)
	}

	// The cell still serves, with the strangers' connections still held.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, pc.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	h, err := cl.Open(ctx, pc.Name("after-flood"), client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SetContents(ctx, []byte("ok")); err != nil {
		t.Fatalf("write after the flood: %v", err)
	}
	log := pc.Log(mi)
	added := strings.Count(log, "\n") - lines0
	t.Logf("log lines written during the flood: %d", added)
	if added > 20 {
		tail := strings.Split(log, "\n")
		t.Errorf("the master logged %d lines for %d stranger connections, want at most 20; last lines:\n%s",
			added, holders+garblers+strangers, strings.Join(tail[max(0, len(tail)-10):], "\n"))
	}
}
