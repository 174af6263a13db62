package admin_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
)

// A backup pages the file out in chunks with progress from the first page
// to the total; VerifyBackup accepts what it wrote. When the master
// changes between pages the backup fails with a typed error that says to
// start again, and a new backup from the new master succeeds.
func TestBackupPagesAndMasterChange(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := c.Client(t)
	for i := range 12 { // about 1.5 MiB: three pages
		h, err := cl.Open(ctx, c.Name(fmt.Sprintf("f%d", i)), client.Read|client.Write|client.Create)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.SetContents(ctx, bytes.Repeat([]byte{'x'}, 128<<10)); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	var calls []uint64
	info, err := admin.New(cl).Backup(ctx, &buf, func(done, total uint64) {
		calls = append(calls, done)
		if total != uint64(buf.Len()) && done == total {
			t.Errorf("progress says done at %d of %d with %d written", done, total, buf.Len())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) < 3 || calls[len(calls)-1] != info.Bytes || uint64(buf.Len()) != info.Bytes || info.Nodes != 13 {
		t.Fatalf("progress %v, info %+v, %d bytes written", calls, info, buf.Len())
	}
	v, err := admin.VerifyBackup(bytes.NewReader(buf.Bytes()))
	if err != nil || v.Checksum != info.Checksum || v.Index != info.Index || v.Nodes != info.Nodes {
		t.Fatalf("verify: %+v %v; backup %+v", v, err, info)
	}

	buf.Reset()
	stopped := false
	_, err = admin.New(cl).Backup(ctx, &buf, func(done, total uint64) {
		if !stopped {
			stopped = true
			c.StopMaster()
		}
	})
	if !errors.Is(err, client.ErrBadRequest) || !strings.Contains(err.Error(), "start the backup again") {
		t.Fatalf("backup across a master change: %v", err)
	}
	buf.Reset()
	if _, err := admin.New(cl).Backup(ctx, &buf, nil); err != nil {
		t.Fatalf("backup from the new master: %v", err)
	}
	if _, err := admin.VerifyBackup(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkBackupCell measures a backup of a three-replica cell holding
// 256 files of 32 KiB (8 MiB of contents) through the client: bytes per
// second end to end, pages included.
func BenchmarkBackupCell(b *testing.B) {
	c := fixtures.NewCell(b, 3, fixtures.Options{})
	ctx := context.Background()
	cl := c.Client(b)
	for i := range 256 {
		h, err := cl.Open(ctx, c.Name(fmt.Sprintf("f%d", i)), client.Read|client.Write|client.Create)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.SetContents(ctx, bytes.Repeat([]byte{byte(i)}, 32<<10)); err != nil {
			b.Fatal(err)
		}
	}
	var buf bytes.Buffer
	b.ResetTimer()
	for b.Loop() {
		buf.Reset()
		info, err := admin.New(cl).Backup(ctx, &buf, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(info.Bytes))
	}
}
