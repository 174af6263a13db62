package cell

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"time"

	"lockcell/replica"
)

// DevConfig configures a development cell: all replicas in one process.
type DevConfig struct {
	// Cell is the cell name (default "local").
	Cell string
	// Dir holds one sub-folder per replica (replica-1 ...).
	Dir string
	// Peers are the members; default LoopbackPeers(5, 7001, 7101).
	Peers []Peer
	// LeaseTTL, MaxLeaseTTL, KeepAliveTarget, DefaultLockDelay and
	// Timings as in Config.
	LeaseTTL         time.Duration
	MaxLeaseTTL      time.Duration
	KeepAliveTarget  int
	DefaultLockDelay time.Duration
	Timings          replica.Timings
	// Logger receives all replicas' logs.
	Logger *slog.Logger
	// MetricsPort, when non-zero, serves replica i's metrics on
	// 127.0.0.1:MetricsPort+i.
	MetricsPort int
	// AuditRetainBytes as in Config.
	AuditRetainBytes int64
}

// Dev is a running development cell.
type Dev struct {
	Cell    string
	Servers []*Server
}

// StartDev starts every replica of a development cell in this process. It
// returns once all replicas are up; use WaitForMaster to wait for service.
// A development cell is plain (Config.Insecure), so its peers must be on
// loopback.
func StartDev(cfg DevConfig) (*Dev, error) {
	if cfg.Cell == "" {
		cfg.Cell = "local"
	}
	if len(cfg.Peers) == 0 {
		cfg.Peers = LoopbackPeers(5, 7001, 7101)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	d := &Dev{Cell: cfg.Cell}
	for i, p := range cfg.Peers {
		metrics := ""
		if cfg.MetricsPort != 0 {
			metrics = "127.0.0.1:" + strconv.Itoa(cfg.MetricsPort+i)
		}
		s, err := New(Config{Cell: cfg.Cell, Self: p.ID, Peers: cfg.Peers, Dir: filepath.Join(cfg.Dir, "replica-"+p.ID),
			LeaseTTL: cfg.LeaseTTL, MaxLeaseTTL: cfg.MaxLeaseTTL, KeepAliveTarget: cfg.KeepAliveTarget, DefaultLockDelay: cfg.DefaultLockDelay, Timings: cfg.Timings, Logger: cfg.Logger,
			MetricsAddr: metrics, Insecure: true, AuditRetainBytes: cfg.AuditRetainBytes})
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("start replica %s: %w", p.ID, err)
		}
		d.Servers = append(d.Servers, s)
	}
	return d, nil
}

// Addrs returns the client addresses of the replicas.
func (d *Dev) Addrs() []string {
	out := make([]string, len(d.Servers))
	for i, s := range d.Servers {
		out[i] = s.ClientAddr()
	}
	return out
}

// WaitForMaster waits until some replica's master serves and returns it.
func (d *Dev) WaitForMaster(ctx context.Context) (*Server, error) {
	return WaitForMaster(ctx, d.Servers)
}

// WaitForMaster waits until one of servers has a serving master.
func WaitForMaster(ctx context.Context, servers []*Server) (*Server, error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		for _, s := range servers {
			if s == nil {
				continue
			}
			if ok, _ := s.IsMaster(); ok {
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no master elected: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Close stops every replica.
func (d *Dev) Close() error {
	var errs []error
	for _, s := range d.Servers {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}
