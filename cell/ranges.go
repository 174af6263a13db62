package cell

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"lockcell/master"
	"lockcell/wire"
)

// The ranges of a replica's numeric settings: every duration, count and
// byte size `lockcelld serve` and `dev` take, from a flag or from the
// configuration file alike, is checked against its entry here before the
// replica starts. A value out of range is refused, naming the setting
// (and the file's line), never clamped or replaced by a default: an
// explicit 0 or a negative limit used to become the default silently.
// Zero fields of Config, ConnLimits and master.Limits still mean "the
// default" to a program that builds a Config itself; the ranges hold for
// what an operator writes.
//
// A new numeric flag needs one entry in SettingRanges (a test walks the
// flags and fails on one without), and an order it must keep with
// another setting one entry in SettingRelations.

// Unit says how a setting's values are written.
type Unit int

const (
	// Count is a plain number.
	Count Unit = iota
	// Duration is a time.Duration, written like 1s or 300ms.
	Duration
	// Bytes is a byte size, written like 4MiB (ParseBytes).
	Bytes
)

// Format writes v as a setting of unit u is written.
func (u Unit) Format(v int64) string {
	switch u {
	case Duration:
		return time.Duration(v).String()
	case Bytes:
		return FormatBytes(v)
	}
	return strconv.FormatInt(v, 10)
}

// SettingRange is the values one setting may take, Min and Max included.
type SettingRange struct {
	Unit     Unit
	Min, Max int64
}

func durations(lo, hi time.Duration) SettingRange {
	return SettingRange{Unit: Duration, Min: int64(lo), Max: int64(hi)}
}

func counts(lo, hi int64) SettingRange { return SettingRange{Unit: Count, Min: lo, Max: hi} }

func sizes(lo, hi int64) SettingRange { return SettingRange{Unit: Bytes, Min: lo, Max: hi} }

// minBuffer is the least request (or reply) budget a level may have: one
// frame of the largest size with room to spare (2 MiB), or an honest
// client's largest call could never be read whole.
const minBuffer = wire.MaxFrameSize + 512<<10

// SettingRanges are the ranges of the settings, by flag name.
var SettingRanges = map[string]SettingRange{
	// Sessions and locks. A lease under a second leaves a client no time
	// for a KeepAlive round; one over ten minutes keeps a dead client's
	// locks that long.
	"lease":            durations(time.Second, 10*time.Minute),
	"max-lease":        durations(0, master.MaxLeaseBound), // 0: leases never lengthen
	"keepalive-target": counts(1, 1_000_000),
	"lock-delay":       durations(time.Millisecond, master.MaxLockDelay),

	// Raft: raft refuses timings under 5 ms; a minute without a heartbeat
	// is an outage, not a timing.
	"raft-heartbeat":      durations(5*time.Millisecond, time.Minute),
	"raft-election":       durations(5*time.Millisecond, time.Minute),
	"raft-leader-lease":   durations(5*time.Millisecond, time.Minute),
	"raft-commit-timeout": durations(time.Millisecond, 10*time.Second),
	"snapshot-interval":   durations(5*time.Millisecond, 24*time.Hour),
	"snapshot-threshold":  counts(1, 1<<50), // log entries on disk: huge means "seldom"
	"trailing-logs":       counts(1, 1<<40),

	// The client port. Counts bound goroutines and file descriptors;
	// bytes bound memory.
	"max-conns-per-ip":        counts(1, 1<<20),
	"max-conns":               counts(1, 1<<22),
	"max-conns-per-principal": counts(1, 1<<22),
	"max-streams-per-conn":    counts(1, 1<<20),
	"max-calls-per-session":   counts(1, 1<<16),
	"handshake-timeout":       durations(100*time.Millisecond, 5*time.Minute),
	"request-timeout":         durations(100*time.Millisecond, 10*time.Minute),
	"stream-idle-timeout":     durations(100*time.Millisecond, time.Hour),
	"max-conn-buffer":         sizes(minBuffer, 1<<30),
	"max-ip-buffer":           sizes(minBuffer, 16<<30),
	"max-buffer":              sizes(minBuffer, 64<<30),
	"max-ip-rate":             sizes(64<<10, 16<<30),
	"buffer-stall":            durations(10*time.Millisecond, time.Minute),
	// The reserve small holders read into when the process budget is
	// full; streams cost about 1.3 KiB of the master's heap each, kept or
	// parked (cell.BenchmarkKeptStreamMemory).
	"buffer-reserve":                 sizes(minBuffer, 16<<30),
	"max-streams-per-ip":             counts(1, 1<<22),
	"max-streams-per-principal":      counts(1, 1<<22),
	"max-streams":                    counts(1, 1<<24),
	"max-kept-streams-per-ip":        counts(1, 1<<22),
	"max-kept-streams-per-principal": counts(1, 1<<22),
	"max-kept-streams":               counts(1, 1<<24),

	// The master. A session costs about 5 KiB and a node about 500 bytes
	// of memory (docs/operations.md, "Sizing"); every replica holds all
	// of them, and a snapshot (nodes and contents) must stay under 1 GiB.
	"max-sessions-per-principal": counts(1, 1_000_000),
	"max-sessions":               counts(1, 1_000_000),
	"max-sessions-per-conn":      counts(1, 1_000_000),
	"max-handles-per-session":    counts(1, 1_000_000),
	"max-read-rate":              sizes(1<<10, 1<<30),
	"max-write-rate":             sizes(1<<10, 1<<30),
	// The change history subtree watches resume from: every replica holds
	// it in memory; a few hundred changes is the least that lets a watcher
	// page through a burst, and more than 1 GiB is a typo.
	"history-changes":         counts(256, 1<<24),
	"history-bytes":           sizes(64<<10, 1<<30),
	"max-nodes":               counts(1, 5_000_000),
	"max-content-bytes":       sizes(1, 1<<30),
	"max-nodes-per-principal": counts(1, 5_000_000),
	"max-backups":             counts(1, 16), // each a copy of the whole state
	// The audit trail keeps at least its newest 16 MiB segment whatever
	// this says; more than 1 TiB is a typo.
	"audit-retain": sizes(1<<20, 1<<40),
	// An idle-session timeout of 0 never closes an idle session; a day
	// is already "never" for a leaked session slot.
	"idle-session-timeout": durations(0, 24*time.Hour),
	// A handle costs every replica about 165 bytes of heap and 68 of
	// snapshot (replica.BenchmarkHandleCost).
	"max-handles-per-principal": counts(1, 5_000_000),
	"max-handles":               counts(1, 5_000_000),
	// The admin's reserves must also stay below their quotas
	// (master.Limits.Check); more than a tenth of the largest quota is
	// no reserve but a second cell.
	"max-content-bytes-per-principal": sizes(1, 1<<30),
	"admin-reserve-nodes":             counts(1, 500_000),
	"admin-reserve-content-bytes":     sizes(1, 100<<20),
	// A registration costs the master about 70 bytes
	// (master.BenchmarkCacheRegistrationCost).
	"max-cache-registrations-per-principal": counts(1, 10_000_000),
	"max-cache-registrations":               counts(1, 10_000_000),
	// A queued event costs about 160 bytes of heap; a budget under one
	// event's estimate would drop every event.
	"max-event-bytes":               sizes(64<<10, 4<<30),
	"max-event-bytes-per-principal": sizes(64<<10, 4<<30),

	// The HTTP port (docs/limits.md, "The HTTP port"). Its connections
	// are also held to an eighth of the file-descriptor limit at start.
	"http-max-conns-per-ip":    counts(1, 1<<16),
	"http-max-conns":           counts(1, 1<<20),
	"http-read-header-timeout": durations(100*time.Millisecond, 5*time.Minute),
	"http-read-timeout":        durations(100*time.Millisecond, 10*time.Minute),
	"http-write-timeout":       durations(100*time.Millisecond, time.Hour),
	"http-idle-timeout":        durations(100*time.Millisecond, time.Hour),

	// dev's cell on loopback.
	"port":         counts(1, math.MaxUint16),
	"raft-port":    counts(1, math.MaxUint16),
	"replicas":     counts(1, 9),
	"metrics-port": counts(0, math.MaxUint16), // 0: no HTTP port
}

// SettingRelation is an order two settings must keep: Key at least
// Other (AtLeast), or at most.
type SettingRelation struct {
	Key, Other string
	AtLeast    bool
	// ZeroExempt exempts a Key of 0 (a feature turned off).
	ZeroExempt bool
}

// SettingRelations are the orders among settings.
var SettingRelations = []SettingRelation{
	{Key: "max-lease", Other: "lease", AtLeast: true, ZeroExempt: true},
	// raft requires election >= heartbeat >= leader lease.
	{Key: "raft-election", Other: "raft-heartbeat", AtLeast: true},
	{Key: "raft-leader-lease", Other: "raft-heartbeat"},
}

// ErrOutOfRange is wrapped by every RangeError.
var ErrOutOfRange = errors.New("out of range")

// RangeError is a setting's value outside its range or its order with
// another setting.
type RangeError struct {
	Key   string
	Unit  Unit
	Value int64
	// Bound is the bound crossed: the range's minimum or maximum, or the
	// value of setting Other.
	Bound int64
	Below bool
	Other string
}

// Reason says what is wrong with the value, e.g. "below the minimum 1s".
func (e *RangeError) Reason() string {
	dir, word := "above the maximum", "more than"
	if e.Below {
		dir, word = "below the minimum", "less than"
	}
	if e.Other != "" {
		return fmt.Sprintf("%s %s (%s)", word, e.Other, e.Unit.Format(e.Bound))
	}
	return dir + " " + e.Unit.Format(e.Bound)
}

func (e *RangeError) Error() string {
	return e.Key + ": " + e.Unit.Format(e.Value) + " is " + e.Reason()
}

func (e *RangeError) Unwrap() error { return ErrOutOfRange }

// CheckSetting checks v against key's range: nil, or a *RangeError. A key
// with no range (not a numeric setting) passes.
func CheckSetting(key string, v int64) error {
	r, ok := SettingRanges[key]
	switch {
	case !ok:
		return nil
	case v < r.Min:
		return &RangeError{Key: key, Unit: r.Unit, Value: v, Bound: r.Min, Below: true}
	case v > r.Max:
		return &RangeError{Key: key, Unit: r.Unit, Value: v, Bound: r.Max}
	}
	return nil
}

// CheckSettingRelations checks values (by setting name) against
// SettingRelations and returns the first broken one as a *RangeError for
// its Key, or nil. A relation with a setting missing from values passes.
func CheckSettingRelations(values map[string]int64) error {
	for _, rel := range SettingRelations {
		v, ok := values[rel.Key]
		o, ok2 := values[rel.Other]
		if !ok || !ok2 || (rel.ZeroExempt && v == 0) {
			continue
		}
		if rel.AtLeast && v < o || !rel.AtLeast && v > o {
			return &RangeError{Key: rel.Key, Unit: SettingRanges[rel.Key].Unit, Value: v, Bound: o, Below: rel.AtLeast, Other: rel.Other}
		}
	}
	return nil
}
