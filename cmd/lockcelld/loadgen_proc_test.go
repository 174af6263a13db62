package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"lockcell/fixtures"
)

// A load generator in a process of its own. A hundred thousand sessions
// are a goroutine and a parked call each: in the benchmark's own process,
// four generators' 35,000 goroutines woken at once queued their
// connections' readers behind them, a proxy's client port closed a
// connection whose yamux ping went unanswered for 5 s, and the run died
// reconnecting. A process per generator is scheduled by the kernel beside
// the cell's processes, as a fleet of clients would be, and collects its
// own heap.

// envLoadGenHelper carries a helper's fixtures.LoadGenConfig as JSON; its
// presence makes TestLoadGenHelper the generator.
const envLoadGenHelper = "LOCKCELL_LOADGEN_HELPER"

// loadGenLine is one line a helper prints on its standard output: its
// counters, once a second, and Started once every session is created.
type loadGenLine struct {
	Started bool               `json:"started,omitempty"`
	Err     string             `json:"err,omitempty"`
	Stats   fixtures.LoadStats `json:"stats"`
}

// TestLoadGenHelper is the generator process (skipped unless started by
// startLoadGenProc): it holds the sessions of its configuration until
// its standard input closes (its parent ended) or it is signalled.
func TestLoadGenHelper(t *testing.T) {
	conf := os.Getenv(envLoadGenHelper)
	if conf == "" {
		t.Skip("a load generator process of the benchmarks")
	}
	var cfg fixtures.LoadGenConfig
	if err := json.Unmarshal([]byte(conf), &cfg); err != nil {
		t.Fatalf("%s: %v", envLoadGenHelper, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { // the parent's end closes stdin
		io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	out := json.NewEncoder(os.Stdout)
	lg := fixtures.NewLoadGen(cfg)
	defer lg.Stop()
	started := make(chan error, 1)
	go func() { started <- lg.Start(ctx) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-started:
			line := loadGenLine{Started: err == nil, Stats: lg.Stats()}
			if err != nil {
				line.Err = err.Error()
			}
			out.Encode(line)
			started = nil
		case <-tick.C:
			out.Encode(loadGenLine{Stats: lg.Stats()})
		}
	}
}

// loadGenProc is a load generator process as its parent sees it.
type loadGenProc struct {
	cmd     *exec.Cmd
	stdin   io.Closer
	mu      sync.Mutex
	last    fixtures.LoadStats
	started chan error // one value: nil once every session is created
}

// startLoadGenProc starts a generator process for cfg (this test binary
// again, running TestLoadGenHelper).
func startLoadGenProc(cfg fixtures.LoadGenConfig) (*loadGenProc, error) {
	conf, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLoadGenHelper$", "-test.bench=^$", "-test.timeout=0")
	// GOGC=400: its heap is mostly its sessions' parked calls, live
	// for the whole run; collecting it at the default rate takes CPU the
	// connections' readers need.
	cmd.Env = append(os.Environ(), envLoadGenHelper+"="+string(conf), "GOGC=400")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &loadGenProc{cmd: cmd, stdin: stdin, started: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		said := false
		for sc.Scan() {
			var l loadGenLine
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				continue // the test binary's own lines
			}
			p.mu.Lock()
			p.last = l.Stats
			p.mu.Unlock()
			if !said && (l.Started || l.Err != "") {
				said = true
				if l.Err != "" {
					p.started <- fmt.Errorf("load generator: %s", l.Err)
				} else {
					p.started <- nil
				}
			}
		}
		if !said {
			p.started <- fmt.Errorf("load generator process ended before its sessions were created")
		}
	}()
	return p, nil
}

// Start waits until every session is created (or ctx ends).
func (p *loadGenProc) Start(ctx context.Context) error {
	select {
	case err := <-p.started:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats is the generator's latest counters (at most a second old).
func (p *loadGenProc) Stats() fixtures.LoadStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// Stop ends the process and waits for it.
func (p *loadGenProc) Stop() {
	p.stdin.Close()
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}
