package cell_test

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
	"lockcell/master"
	"lockcell/wire"
)

// Concurrent backups are admitted up to their cap and no further: the
// slot is taken before the snapshot is built, so callers racing for the
// last one cannot all pass a check made while the others still build.
// Once the admitted ones are paged out, new backups are admitted (a
// failed start gives its slot back: master.TestFailedBackupsGiveTheirSlotBack).
func TestConcurrentBackupsStayWithinTheirCap(t *testing.T) {
	const racers = 12
	limit := master.DefaultLimits.Backups
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx := ctxT(t, 2*time.Minute)
	m := c.WaitForMaster(30 * time.Second)
	cl := c.Client(t)

	// More state than one page, so that an admitted backup stays held
	// until it is paged out.
	for i := range 4 {
		h, err := cl.Open(ctx, c.Name(fmt.Sprint("big", i)), client.Create|client.Write)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.SetContents(ctx, bytes.Repeat([]byte{byte('a' + i)}, wire.MaxContents)); err != nil {
			t.Fatal(err)
		}
	}

	r := dialRawSession(t, ctx, c.Addrs()[m], nil)
	var (
		mu      sync.Mutex
		started []wire.BackupResponse
		refused int
		wg      sync.WaitGroup
	)
	for range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var resp wire.BackupResponse
			st, err := r.try(ctx, wire.MethodBackup, &wire.BackupRequest{}, &resp)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("backup: %v", err)
			case st.Code == wire.CodeOK:
				started = append(started, resp)
			case st.Code == wire.CodeTooMany:
				refused++
			default:
				t.Errorf("backup: %+v", st)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if len(started) != limit || refused != racers-limit {
		t.Fatalf("%d racing backups: %d admitted, %d refused as too many; the cap is %d", racers, len(started), refused, limit)
	}
	for _, b := range started {
		if b.Total <= uint64(len(b.Chunk)) {
			t.Fatalf("backup %d fits one page (%d bytes): it holds no slot afterwards", b.ID, b.Total)
		}
	}
	// The admitted ones hold their slots while they are paged.
	var resp wire.BackupResponse
	if st := r.call(ctx, wire.MethodBackup, &wire.BackupRequest{}, &resp); st.Code != wire.CodeTooMany {
		t.Fatalf("a backup while %d are held: %+v, want too many", limit, st)
	}

	// Paged out to the end, they free their slots.
	for _, b := range started {
		for off := uint64(len(b.Chunk)); off < b.Total; {
			var page wire.BackupResponse
			if st := r.call(ctx, wire.MethodBackup, &wire.BackupRequest{ID: b.ID, Offset: off}, &page); st.Code != wire.CodeOK {
				t.Fatalf("page at %d of backup %d: %+v", off, b.ID, st)
			}
			off += uint64(len(page.Chunk))
		}
	}
	errs := make(chan error, limit)
	for range limit {
		go func() {
			_, err := admin.New(cl).Backup(ctx, io.Discard, nil)
			errs <- err
		}()
	}
	for range limit {
		if err := <-errs; err != nil {
			t.Fatalf("a backup after the held ones ended: %v", err)
		}
	}
}
