package client

import (
	"slices"
	"testing"
	"time"

	"lockcell/cache"
)

// TestHandlePoolDropsOldIdleHandles: the handles pooled before the cutoff
// are taken out (to be closed at the master, so a forgotten Client's
// session can go idle) and counted out; younger ones stay, under their
// keys.
func TestHandlePoolDropsOldIdleHandles(t *testing.T) {
	var p handlePool
	fresh := func(cache.Token) bool { return true }
	t0 := time.Unix(1000, 0)
	a, b := poolKey{name: "/ls/t/a"}, poolKey{name: "/ls/t/b"}
	for i, ph := range []struct {
		key poolKey
		id  uint64
		at  time.Time
	}{{a, 1, t0}, {a, 2, t0.Add(30 * time.Second)}, {b, 3, t0.Add(time.Second)}} {
		if !p.keep(ph.key, pooledHandle{id: ph.id, since: ph.at}, fresh) {
			t.Fatalf("handle %d not pooled", i)
		}
	}
	got := p.dropOlder(t0.Add(maxPooledAge))
	slices.Sort(got)
	if !slices.Equal(got, []uint64{1, 3}) || p.len() != 1 {
		t.Fatalf("dropped %v, %d left; want [1 3], 1 left", got, p.len())
	}
	if ph, ok, _ := p.take(a, fresh); !ok || ph.id != 2 {
		t.Fatalf("the young handle is not there to take: %+v %v", ph, ok)
	}
}
