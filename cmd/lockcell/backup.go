package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/backupfile"
	"lockcell/client/admin"
	"lockcell/wire"
)

// backupCommand writes a backup of the cell to a file, or checks one.
func backupCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "backup",
		Usage:     "write a consistent snapshot of the whole cell to FILE (admin only), or check one with --verify",
		ArgsUsage: "FILE | --dir DIR [--keep N]",
		Description: "Streams one point-in-time snapshot of the cell from the master into FILE: every node with its " +
			"stat and contents, the ACL files and the cell's sequencer key, at an index the master confirmed as " +
			"leader while the cell keeps serving. The file ends with a SHA-256 of its bytes, checked as it arrives; " +
			"it is written to FILE.partial and renamed to FILE only when complete and synced. An existing FILE is " +
			"refused (exit 1, JSON code \"exists\") unless --force replaces it. The summary's sha256 is that of the " +
			"whole file as written, as `sha256sum FILE` prints it (--json: \"sha256\"; \"checksum\" is the one the " +
			"file ends with, of the bytes before it). Only the cell's " +
			"admin may take a backup. On a terminal a progress bar shows on stderr. Without --timeout the backup " +
			"runs as long as it takes.\n\n" +
			"--verify FILE reads the file back without contacting the cell: it checks the header, every length, the " +
			"checksum, and decodes the snapshot in full (a changed or missing byte is reported).\n\n" +
			"Restore with `lockcelld restore --from FILE` on every replica of a new cell (see the README).\n\n" +
			"For scheduled backups, --dir DIR names the file DIR/<cell>-<UTC time>.lcb instead of FILE; with " +
			"--keep N the new file is read back and verified, then the cell's scheduled backups in DIR but the " +
			"newest N are deleted (other files in DIR are never touched). deploy/systemd and deploy/kubernetes/backup " +
			"run it on a timer.\n\n" +
			"Examples:\n   lockcell backup /var/backups/lockcell-$(date +%F).lcb\n   lockcell backup --verify /var/backups/lockcell-2026-01-01.lcb",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "verify", Usage: "check FILE instead of writing one"},
			&cli.BoolFlag{Name: "force", Usage: "replace FILE if it exists"},
			&cli.StringFlag{Name: "dir", Usage: "write DIR/<cell>-<UTC time>.lcb instead of FILE (for scheduled backups)"},
			&cli.IntFlag{Name: "keep", Usage: "with --dir: verify the new backup, then delete the cell's scheduled backups in DIR but the newest `N` (0: keep all)"},
		},
		Action: func(c *cli.Context) error {
			dir, keep := c.String("dir"), c.Int("keep")
			switch {
			case keep < 0:
				return usageErrorf(c, "--keep must not be negative, got %d", keep)
			case keep > 0 && dir == "":
				return usageErrorf(c, "--keep needs --dir: it prunes the scheduled backups in a folder")
			case dir != "" && c.Bool("verify"):
				return usageErrorf(c, "--dir writes a backup; --verify checks one FILE")
			case dir != "":
				if err := wantArgs(c, 0, 0); err != nil {
					return err
				}
				return e.scheduledBackup(c, dir, keep)
			}
			if err := wantArgs(c, 1, 1); err != nil {
				return err
			}
			path := c.Args().First()
			if c.Bool("verify") {
				return e.verifyBackup(path)
			}
			info, err := e.writeBackup(c, path, c.Bool("force"))
			if err != nil {
				return err
			}
			return e.printBackup(path, info, nil)
		},
	}
}

func (e *env) verifyBackup(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fail("backup --verify", path, err)
	}
	defer f.Close()
	info, err := admin.VerifyBackup(f)
	if err != nil {
		return fail("backup --verify", path, err)
	}
	if e.json {
		return e.printJSON(backupSummary{File: path, BackupInfo: info, Verified: true})
	}
	fmt.Fprintf(e.stdout, "%s: ok: cell %s, index %d, %d nodes, %d sessions, taken %s, %d bytes, sha256 %s\n",
		path, info.Cell, info.Index, info.Nodes, info.Sessions, info.Time.Format(time.RFC3339), info.Bytes, info.SHA256)
	return nil
}

// backupSummary is backup's --json output.
type backupSummary struct {
	File string `json:"file"`
	*admin.BackupInfo
	Verified bool `json:"verified,omitempty"`
	// Removed lists the older backups --keep deleted.
	Removed []string `json:"removed,omitempty"`
}

// scheduledBackup is backup --dir DIR [--keep N]: a backup under a name
// that sorts by time, then, with keep, the new file verified and the
// older ones pruned (never on a backup that did not verify).
func (e *env) scheduledBackup(c *cli.Context, dir string, keep int) error {
	path := filepath.Join(dir, backupfile.ScheduledName(e.cell, time.Now()))
	info, err := e.writeBackup(c, path, false)
	if err != nil {
		return err
	}
	var removed []string
	if keep > 0 {
		f, err := os.Open(path)
		if err != nil {
			return fail("backup", path, err)
		}
		_, err = admin.VerifyBackup(f)
		f.Close()
		if err != nil {
			return fail("backup", path, fmt.Errorf("the new backup does not verify, so no older one was deleted: %w", err))
		}
		removed, err = backupfile.Prune(dir, e.cell, keep)
		if err != nil {
			return fail("backup", dir, fmt.Errorf("pruning older backups (deleted %d): %w", len(removed), err))
		}
	}
	return e.printBackup(path, info, removed)
}

// writeBackup takes a backup into path (refusing an existing one unless
// force).
func (e *env) writeBackup(c *cli.Context, path string, force bool) (*admin.BackupInfo, error) {
	// Refused before the cell is asked: a backup of a large cell takes a
	// while, and the file may be the last good backup.
	if _, err := os.Lstat(path); err == nil && !force {
		return nil, fail("backup", path, errExists(path))
	}
	if !e.timeoutSet {
		// A large cell takes as long as it takes; --timeout bounds it
		// only when given.
		e.cancel()
		e.ctx, e.cancel = context.WithCancel(c.Context)
	}
	cl, err := e.client()
	if err != nil {
		return nil, err
	}
	tmp := path + ".partial"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fail("backup", path, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	var bar *progressBar
	if isTerminal(asReader(e.stderr)) && !e.json {
		bar = &progressBar{w: e.stderr, start: time.Now()}
	}
	info, err := admin.New(cl).Backup(e.ctx, f, bar.update)
	bar.finish()
	if err != nil {
		return nil, fail("backup", path, err)
	}
	if err := f.Sync(); err != nil {
		return nil, fail("backup", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fail("backup", path, err)
	}
	if err := place(tmp, path, force); err != nil {
		return nil, fail("backup", path, err)
	}
	ok = true
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync() // the rename, durably
		d.Close()
	}
	return info, nil
}

// printBackup prints a backup's summary (and, after --keep, the backups
// deleted: on stderr for people).
func (e *env) printBackup(path string, info *admin.BackupInfo, removed []string) error {
	if e.json {
		return e.printJSON(backupSummary{File: path, BackupInfo: info, Removed: removed})
	}
	for _, r := range removed {
		fmt.Fprintf(e.stderr, "deleted the older backup %s\n", r)
	}
	_, err := fmt.Fprintf(e.stdout, "%s: cell %s, index %d, %d nodes, %d bytes, sha256 %s\n",
		path, info.Cell, info.Index, info.Nodes, info.Bytes, info.SHA256)
	return err
}

// errExists refuses to replace path.
func errExists(path string) error {
	return wire.Errorf(wire.CodeExists, "%s exists: give --force to replace it, or another name", path)
}

// place moves the complete backup tmp to path: with force replacing
// whatever is there, otherwise only if path still does not exist (a
// hard link fails on an existing name, so a file that appeared during
// the backup is not overwritten either).
func place(tmp, path string, force bool) error {
	if force {
		return os.Rename(tmp, path)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return errExists(path)
		}
		return err
	}
	return os.Remove(tmp)
}

// asReader returns w as a reader when it is one (an *os.File), for
// isTerminal.
func asReader(w io.Writer) io.Reader {
	r, _ := w.(io.Reader)
	return r
}

// progressBar draws one self-overwriting line on a terminal. A nil bar
// draws nothing.
type progressBar struct {
	w     io.Writer
	start time.Time
	last  time.Time
	drawn bool
}

func (b *progressBar) update(done, total uint64) {
	if b == nil {
		return
	}
	now := time.Now()
	if done < total && now.Sub(b.last) < 100*time.Millisecond {
		return
	}
	b.last = now
	const width = 30
	frac := 1.0
	if total > 0 {
		frac = float64(done) / float64(total)
	}
	fill := int(frac * width)
	rate := float64(done) / max(now.Sub(b.start).Seconds(), 1e-3)
	fmt.Fprintf(b.w, "\r[%s%s] %3.0f%% %s / %s %s/s ", strings.Repeat("=", fill), strings.Repeat(" ", width-fill),
		frac*100, humanBytes(float64(done)), humanBytes(float64(total)), humanBytes(rate))
	b.drawn = true
}

func (b *progressBar) finish() {
	if b != nil && b.drawn {
		fmt.Fprintln(b.w)
	}
}

// humanBytes renders a byte count with a binary unit.
func humanBytes(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f %s", n, units[i])
	}
	return fmt.Sprintf("%.1f %s", n, units[i])
}
