package master

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/fsm"
	"lockcell/wire"
)

// unconfirmed is a localConsensus whose leadership a quorum does not
// confirm while fail is set.
type unconfirmed struct {
	*localConsensus
	fail atomic.Bool
}

func (u *unconfirmed) VerifyLeader(ctx context.Context) error {
	if u.fail.Load() {
		return errors.New("no quorum")
	}
	return u.localConsensus.VerifyLeader(ctx)
}

// A backup that fails before it is held gives its slot back: more failed
// starts than the cap leave every slot free for the next backups.
func TestFailedBackupsGiveTheirSlotBack(t *testing.T) {
	sm := fsm.NewFSM("c", slog.New(slog.NewTextHandler(io.Discard, nil)))
	cons := &unconfirmed{localConsensus: &localConsensus{fsm: sm}}
	m := newTestMasterOn(t, cons, sm)
	sess, _ := m.sessionWithFile(t)
	limit := DefaultLimits.Backups

	cons.fail.Store(true)
	for range limit + 1 {
		m.clock.Advance(time.Millisecond) // the last proof of leadership is too old for the next read
		if _, err := m.call(sess, 0, wire.MethodBackup, &wire.BackupRequest{}); err == nil || codeOf(err) == wire.CodeTooMany {
			t.Fatalf("a backup on a master that cannot confirm it leads: %v", err)
		}
	}
	if n := m.BackupsInFlight(); n != 0 {
		t.Fatalf("%d backups in flight after failed starts, want 0", n)
	}
	cons.fail.Store(false)
	// The state fits one page, so each backup is dropped as soon as its
	// only page is served: hold them by the store instead.
	for i := range limit {
		if !m.backups.reserve(limit) {
			t.Fatalf("slot %d of %d refused after failed starts", i+1, limit)
		}
	}
	if _, err := m.call(sess, 0, wire.MethodBackup, &wire.BackupRequest{}); codeOf(err) != wire.CodeTooMany {
		t.Fatalf("a backup with every slot taken: %v, want too many", err)
	}
	m.backups.unreserve()
	if _, err := m.call(sess, 0, wire.MethodBackup, &wire.BackupRequest{}); err != nil {
		t.Fatalf("a backup with a slot free: %v", err)
	}
	if n := m.BackupsInFlight(); n != limit-1 {
		t.Fatalf("%d backups in flight, want %d (the served one dropped after its only page)", n, limit-1)
	}
}
