package master

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"lockcell/fsm"
	"lockcell/wire"
)

// Backups in flight are held between pages in unlinked temporary files
// (fsm.Backup), not in the master's memory. A backup nobody asks a
// page of for backupIdle is dropped; at most Limits.Backups are built or
// held at once, so an admin cannot make the master hold many copies of
// the state, on disk or (while one is built) in memory.
const backupIdle = time.Minute

// backupStore holds the backups being paged out, and counts those being
// built. The zero value is ready.
type backupStore struct {
	mu       sync.Mutex
	held     map[uint64]*heldBackup
	building int // slots taken by backups not yet held (reserve)
	// build lets one backup be built at a time: a build holds a copy of
	// the state besides the file it makes, and two at once would hold two.
	build sync.Mutex
}

type heldBackup struct {
	b     *fsm.Backup
	timer Timer // drops the backup when idle
}

// termer is what a Consensus that knows its Raft term offers (the
// replica does); the term goes into the backup's header.
type termer interface{ Term() uint64 }

// backup serves one page of a backup file (wire.BackupRequest). Only the
// admin may take one: a backup holds every node, ACL and the sequencer key.
// Anyone else is refused before anything is read, with a message that
// names nothing of the cell.
func (e *adminEndpoint) backup(ctx context.Context, c *call, req *wire.BackupRequest) (*wire.BackupResponse, error) {
	if !c.isAdmin() {
		return nil, wire.Errorf(wire.CodePermission, "only the cell's admin may take a backup")
	}
	st := e.backups
	if req.ID == 0 {
		id, err := e.startBackup(ctx, c)
		if err != nil {
			return nil, err
		}
		req.ID = id
	}
	b, ok := st.get(e.cfg.Clock, req.ID)
	if !ok {
		return nil, wire.Errorf(wire.CodeBadRequest,
			"backup %d is not held by this master (finished, idle for %s, or the master changed): start the backup again", req.ID, backupIdle)
	}
	size := uint64(b.Size)
	if req.Offset > size {
		return nil, wire.Errorf(wire.CodeBadRequest, "offset %d is past the backup's %d bytes", req.Offset, size)
	}
	end := min(req.Offset+wire.BackupChunk, size)
	chunk := make([]byte, end-req.Offset)
	if _, err := b.ReadAt(chunk, int64(req.Offset)); err != nil && !errors.Is(err, io.EOF) {
		if errors.Is(err, os.ErrClosed) { // dropped (idle) since get
			return nil, wire.Errorf(wire.CodeBadRequest, "backup %d is no longer held: start the backup again", req.ID)
		}
		return nil, wire.Errorf(wire.CodeInternal, "backup %d: %v", req.ID, err)
	}
	h := b.Header
	resp := &wire.BackupResponse{ID: req.ID, Offset: req.Offset, Chunk: chunk, Total: size,
		Checksum: b.Checksum[:], Cell: h.Cell, Applied: h.Applied, Term: h.Term, Epoch: h.Epoch, Time: h.Time,
		Nodes: h.Nodes, Sessions: h.Sessions}
	if end == size {
		st.drop(req.ID)
	}
	return resp, nil
}

// startBackup builds a new backup and holds it for paging, returning its
// id. Its slot is taken before anything is read or built: a check made
// before the build and a take after it let every concurrent caller pass
// the check while the others were still building, each with its own copy
// of the state. A build that fails gives its slot back.
func (e *adminEndpoint) startBackup(ctx context.Context, c *call) (uint64, error) {
	st := e.backups
	limit := e.cfg.Limits.Backups
	if !st.reserve(limit) {
		return 0, wire.Errorf(wire.CodeTooMany, "%d backups are being taken, the limit; finish or abandon one (an abandoned one is dropped after %s)", limit, backupIdle)
	}
	held := false
	defer func() {
		if !held {
			st.unreserve()
		}
	}()
	// The snapshot holds every write acknowledged before this call: a
	// quorum confirms this replica still leads, so they are applied here.
	if err := e.r.verify(ctx); err != nil {
		return 0, err
	}
	if err := e.r.view(c.liveSession); err != nil {
		return 0, err
	}
	var term uint64
	if t, ok := e.w.cons.(termer); ok {
		term = t.Term()
	}
	st.build.Lock()
	b, err := e.r.state.Backup(term, e.cfg.Clock.Now())
	st.build.Unlock()
	if err != nil {
		return 0, wire.Errorf(wire.CodeInternal, "backup: %v", err)
	}
	// A backup holds every node, ACL and the sequencer key: it is handed
	// out only once the audit trail holds it (a Note entry), so every
	// replica's trail says who took which.
	note := &fsm.NoteArgs{Op: "backup", Detail: fmt.Sprintf("state at index %d, %d nodes, %d sessions, %d bytes, checksum %x",
		b.Header.Applied, b.Header.Nodes, b.Header.Sessions, b.Size, b.Checksum[:8])}
	if _, err := e.w.apply(ctx, c, &fsm.Command{Payload: note}); err != nil {
		b.Close()
		return 0, err
	}
	e.cfg.Logger.Info("backup taken", "index", b.Header.Applied, "nodes", b.Header.Nodes, "bytes", b.Size,
		"lock_held", b.LockHeld)
	held = true
	return st.add(e.cfg.Clock, b), nil
}

// reserve takes one of limit slots for a backup about to be built, or
// reports that all are taken (by backups held or being built); checked and
// taken under one lock.
func (st *backupStore) reserve(limit int) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.held)+st.building >= limit {
		return false
	}
	st.building++
	return true
}

// unreserve gives back a slot reserve took for a backup that was not built.
func (st *backupStore) unreserve() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.building--
}

// inFlight is the number of backups held or being built.
func (st *backupStore) inFlight() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.held) + st.building
}

// add holds b, in the slot reserve took for it, and returns its id.
func (st *backupStore) add(clk Clock, b *fsm.Backup) uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.building--
	if st.held == nil {
		st.held = map[uint64]*heldBackup{}
	}
	// Random ids: a client whose master changed mid-backup must not get
	// pages of another backup the new master holds under the same id.
	id := rand.Uint64()
	for id == 0 || st.held[id] != nil {
		id = rand.Uint64()
	}
	st.held[id] = &heldBackup{b: b, timer: clk.AfterFunc(backupIdle, func() { st.drop(id) })}
	return id
}

// get returns backup id and restarts its idle timer.
func (st *backupStore) get(clk Clock, id uint64) (*fsm.Backup, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	h := st.held[id]
	if h == nil {
		return nil, false
	}
	h.timer.Stop()
	h.timer = clk.AfterFunc(backupIdle, func() { st.drop(id) })
	return h.b, true
}

// drop forgets backup id (a no-op when it is gone).
func (st *backupStore) drop(id uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if h := st.held[id]; h != nil {
		h.timer.Stop()
		delete(st.held, id)
		h.b.Close()
	}
}

// BackupsInFlight is the number of backups this master is building or
// holds for paging (at most Limits.Backups).
func (s *Server) BackupsInFlight() int { return s.backups.inFlight() }
