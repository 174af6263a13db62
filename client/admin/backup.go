package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"lockcell/backupfile"
	"lockcell/client/internal/link"
	"lockcell/codec"
	"lockcell/wire"
)

// BackupInfo describes a backup file: the cell and index of the state it
// holds, its size and its SHA-256 (the checksum the file ends with).
type BackupInfo struct {
	Cell string `json:"cell"`
	// Index is the index of the last Raft entry the backed-up state applied.
	Index    uint64    `json:"index"`
	Term     uint64    `json:"term"`
	Epoch    uint64    `json:"epoch"`
	Time     time.Time `json:"time"`
	Nodes    uint64    `json:"nodes"`
	Sessions uint64    `json:"sessions"`
	// Bytes is the file's length; SnapshotBytes the state's part of it.
	Bytes         uint64 `json:"bytes"`
	SnapshotBytes uint64 `json:"snapshot_bytes,omitempty"`
	// Checksum is the hex SHA-256 the file ends with: that of every
	// byte before it.
	Checksum string `json:"checksum"`
	// SHA256 is the hex SHA-256 of the whole file as written, its last
	// 32 bytes included: what `sha256sum FILE` prints, to check a copy
	// with the usual tools.
	SHA256 string `json:"sha256"`
}

// ErrBadBackup means a backup file (or a backup's stream) is not intact:
// cut short, a checksum that does not match its bytes, or not a lockcell
// backup at all. The message says which.
var ErrBadBackup = errors.New("lockcell: bad backup")

// Backup streams a backup of the cell from the master into w: one
// consistent snapshot of the whole state (every node, its stat and
// contents, the ACLs, the sessions and the cell's sequencer key) at an
// index the master confirmed as leader, in pages of 512 KiB.
// progress, when not nil, is called after each page with the bytes
// written so far and the total. The bytes are checked against the
// checksum the master announced before Backup returns; a mismatch is
// ErrBadBackup. Only the cell's admin may take a backup (client.ErrPermission).
// A change of master during the backup fails it (client.ErrBadRequest): start
// again.
func (a *Admin) Backup(ctx context.Context, w io.Writer, progress func(done, total uint64)) (*BackupInfo, error) {
	var resp wire.BackupResponse
	if err := link.Call(a.c, ctx, wire.MethodBackup, false, &wire.BackupRequest{}, &resp); err != nil {
		return nil, opErr("backup", "", err)
	}
	first := resp
	hash := sha256.New()
	whole := sha256.New() // every byte written, as sha256sum sees the file
	var done uint64
	for {
		if resp.ID != first.ID || resp.Offset != done || resp.Total != first.Total || !bytes.Equal(resp.Checksum, first.Checksum) {
			return nil, opErr("backup", "", fmt.Errorf("%w: page at %d of backup %d does not follow byte %d of backup %d",
				ErrBadBackup, resp.Offset, resp.ID, done, first.ID))
		}
		if len(resp.Chunk) == 0 && done < resp.Total {
			return nil, opErr("backup", "", fmt.Errorf("%w: empty page at %d of %d bytes", ErrBadBackup, done, resp.Total))
		}
		// The last 32 bytes are the checksum itself.
		if body := resp.Total - sha256.Size; done < body {
			hash.Write(resp.Chunk[:min(uint64(len(resp.Chunk)), body-done)])
		}
		if _, err := w.Write(resp.Chunk); err != nil {
			return nil, opErr("backup", "", err)
		}
		whole.Write(resp.Chunk)
		done += uint64(len(resp.Chunk))
		if progress != nil {
			progress(done, resp.Total)
		}
		if done >= resp.Total {
			break
		}
		resp = wire.BackupResponse{}
		if err := link.Call(a.c, ctx, wire.MethodBackup, false, &wire.BackupRequest{ID: first.ID, Offset: done}, &resp); err != nil {
			return nil, opErr("backup", "", err)
		}
	}
	if sum := hash.Sum(nil); !bytes.Equal(sum, first.Checksum) {
		return nil, opErr("backup", "", fmt.Errorf("%w: the bytes received hash to %x, the master announced %x", ErrBadBackup, sum[:8], first.Checksum[:8]))
	}
	info := &BackupInfo{Cell: first.Cell, Index: first.Applied, Term: first.Term, Epoch: first.Epoch,
		Time: time.Unix(0, first.Time).UTC(), Nodes: first.Nodes, Sessions: first.Sessions, Bytes: first.Total,
		Checksum: hex.EncodeToString(first.Checksum), SHA256: hex.EncodeToString(whole.Sum(nil))}
	return info, nil
}

// maxBackupState bounds the snapshot a backup file may announce, as a
// replica bounds the snapshots it restores.
const maxBackupState = 1 << 30

// VerifyBackup reads a backup file to its end and checks it: the magic
// and format, every length (a file cut short says how much is missing),
// the trailing SHA-256 (any changed byte fails it), nothing after it, and
// the snapshot decoded in full (every value, with every length checked
// against the bytes present) with its cell, index and node count equal to
// the header's. Every failure wraps ErrBadBackup. `lockcelld restore
// --dry-run` further checks the state's own rules (parents exist, locks
// name open handles) as a replica restoring it would.
func VerifyBackup(r io.Reader) (*BackupInfo, error) {
	whole := sha256.New()
	f, err := backupfile.Read(io.TeeReader(r, whole), maxBackupState, ErrBadBackup)
	if err != nil {
		return nil, err
	}
	h := &f.Header
	if err := decodeState(f.Snapshot, h); err != nil {
		return nil, fmt.Errorf("%w: snapshot: %v", ErrBadBackup, err)
	}
	return &BackupInfo{Cell: h.Cell, Index: h.Applied, Term: h.Term, Epoch: h.Epoch, Time: time.Unix(0, h.Time).UTC(),
		Nodes: h.Nodes, Sessions: h.Sessions, Bytes: f.Size,
		SnapshotBytes: h.Length, Checksum: hex.EncodeToString(f.Checksum[:]), SHA256: hex.EncodeToString(whole.Sum(nil))}, nil
}

// decodeState decodes snapshot bytes in full, as generic values, and
// checks the fields the header repeats: the cell ("c"), the applied index
// ("a") and the number of nodes ("n").
func decodeState(b []byte, h *backupfile.Header) error {
	if err := codec.CheckBounds(b); err != nil {
		return err
	}
	d := msgpack.NewDecoder(bytes.NewReader(b))
	var state map[string]any
	if err := d.Decode(&state); err != nil {
		return err
	}
	if _, err := d.PeekCode(); err == nil {
		return errors.New("bytes after the state")
	}
	cell, _ := state["c"].(string)
	nodes, _ := state["n"].([]any)
	applied, ok := asUint(state["a"])
	if cell != h.Cell || !ok || applied != h.Applied || uint64(len(nodes)) != h.Nodes {
		return fmt.Errorf("the header (cell %q, index %d, %d nodes) does not describe its snapshot (cell %q, index %d, %d nodes)",
			h.Cell, h.Applied, h.Nodes, cell, applied, len(nodes))
	}
	return nil
}

func asUint(v any) (uint64, bool) {
	switch n := v.(type) {
	case uint64:
		return n, true
	case uint32:
		return uint64(n), true
	case uint16:
		return uint64(n), true
	case uint8:
		return uint64(n), true
	case int64:
		return uint64(n), n >= 0
	case int8:
		return uint64(n), n >= 0
	}
	return 0, false
}
