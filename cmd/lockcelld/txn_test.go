package main

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// A counter kept with check-generation transactions while the master's
// process is killed with SIGKILL: transactions in flight at the kill are
// retried at the next master under the same request id, so one the old
// master committed but never answered is answered from the
// de-duplication table, not applied again. The counter ends at exactly
// the number of increments the callers were told succeeded.
func TestTxnCounterAcrossMasterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three processes")
	}
	bin := fixtures.BuildLockcelld(t)
	pc := fixtures.NewProcCell(t, bin, "txn", 3, 4*time.Second)
	mi := pc.MasterIndex(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, pc.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	name := pc.Name("counter")
	h, err := cl.Open(ctx, name, client.Read|client.Write|client.Create, client.WithContents([]byte("0")))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()

	var done atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				data, st, err := h.GetContentsAndStat(ctx)
				if err != nil {
					t.Errorf("read: %v", err)
					return
				}
				v, _ := strconv.Atoi(string(data))
				_, err = cl.Txn(ctx).If(client.GenerationIs(name, st.ContentGen)).
					Then(client.OpSet(name, []byte(strconv.Itoa(v+1)))).Commit()
				if errors.Is(err, client.ErrGenerationMismatch) {
					continue
				}
				if err != nil {
					t.Errorf("commit: %v", err)
					return
				}
				done.Add(1)
			}
		}()
	}
	waitFor := func(n int64, what string) {
		deadline := time.Now().Add(60 * time.Second)
		for done.Load() < n {
			if time.Now().After(deadline) || t.Failed() {
				t.Fatalf("%s: only %d increments", what, done.Load())
			}
			time.Sleep(10 * time.Millisecond) // polling the workers' progress
		}
	}
	waitFor(100, "before the kill")
	pc.Kill(mi)
	pc.MasterIndex(60 * time.Second)
	waitFor(done.Load()+100, "after the kill")
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	data, _, err := h.GetContentsAndStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(data); got != strconv.FormatInt(done.Load(), 10) {
		t.Fatalf("the counter is %s after %d increments the callers were told succeeded", got, done.Load())
	}
	t.Logf("%d increments across the kill", done.Load())
}
