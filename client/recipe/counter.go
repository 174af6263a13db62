package recipe

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"lockcell/client"
)

// ErrNotCounter means a counter's file holds something other than a
// decimal integer (an empty file counts as zero).
var ErrNotCounter = errors.New("lockcell: not a counter")

// Counter is a shared integer kept in one permanent file as decimal text,
// changed only by compare-and-swap transactions, so concurrent Adds from
// any number of clients never lose an update: K adders of 1 leave exactly
// K more. A Counter value is safe for concurrent use.
//
// Failure modes: an Add whose transaction was sent but whose answer was
// lost to a master change is retried under the same request id
// (client.Txn), so it applies at most once. An Add that returns an error
// (ctx ended, no master within the client's RetryTimeout, the session
// expired) did not apply, unless the error came while its transaction
// was in flight: then it may have, and Get tells. A jeopardy only delays
// it. The file is permanent: the count outlives every client.
type Counter struct {
	c    *client.Client
	name string
}

// NewCounter returns the counter kept in the file name (resolved as by
// client.Client.Open), creating it and its missing parents with the value
// 0 if it does not exist. Adding needs write permission on name, Get
// read permission.
func NewCounter(ctx context.Context, c *client.Client, name string) (*Counter, error) {
	name = client.ResolveName(c.Cell(), name)
	h, err := c.Open(ctx, name, client.Read|client.Write|client.Create, client.WithParents(), client.WithContents([]byte("0")))
	if err != nil {
		return nil, err
	}
	h.Close()
	return &Counter{c: c, name: name}, nil
}

// CounterAt returns the counter kept in the existing file name (resolved
// as by client.Client.Open) without making any call or creating it: for
// a reader that must not create a counter by looking at it. Get and Add
// on a missing file fail with client.ErrNotFound.
func CounterAt(c *client.Client, name string) *Counter {
	return &Counter{c: c, name: client.ResolveName(c.Cell(), name)}
}

// Name is the counter's file.
func (k *Counter) Name() string { return k.name }

// Get returns the counter's value: a linearizable read (or one from the
// client's cache, which the master invalidates before any Add applies).
func (k *Counter) Get(ctx context.Context) (int64, error) {
	v, _, err := k.read(ctx, false)
	return v, err
}

func (k *Counter) read(ctx context.Context, fresh bool) (int64, uint64, error) {
	var opts []client.OpenOption
	if fresh {
		opts = append(opts, client.WithoutCache())
	}
	h, err := k.c.Open(ctx, k.name, client.Read, opts...)
	if err != nil {
		return 0, 0, err
	}
	defer h.Close()
	data, st, err := h.GetContentsAndStat(ctx)
	if err != nil {
		return 0, 0, err
	}
	s := strings.TrimSpace(string(data))
	if s == "" {
		return 0, st.ContentGen, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, 0, &client.OpError{Op: "counter", Path: k.name, Err: fmt.Errorf("%w: %q", ErrNotCounter, data)}
	}
	return v, st.ContentGen, nil
}

// Add adds delta to the counter and returns the new value. It reads the
// value and its content generation, then commits a transaction that
// writes the sum only if the generation is unchanged; when another Add
// got in between (client.ErrGenerationMismatch) it reads again and
// retries, after a short random pause that grows with each conflict so
// that many adders do not keep colliding. It returns only once its own
// write applied, or with an error (ctx, the session, ErrNotCounter).
func (k *Counter) Add(ctx context.Context, delta int64) (int64, error) {
	pause := time.Millisecond
	for {
		v, gen, err := k.read(ctx, true)
		if err != nil {
			return 0, err
		}
		nv := v + delta
		_, err = k.c.Txn(ctx).If(client.GenerationIs(k.name, gen)).
			Then(client.OpSet(k.name, []byte(strconv.FormatInt(nv, 10)))).Commit()
		if err == nil {
			return nv, nil
		}
		if !errors.Is(err, client.ErrGenerationMismatch) {
			return 0, err
		}
		if err := sleepCtx(ctx, rand.N(pause)+time.Millisecond); err != nil {
			return 0, err
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
