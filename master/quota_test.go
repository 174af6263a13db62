package master

import (
	"errors"
	"testing"

	"lockcell/fsm"
)

// The admin's reserves are derived from their quotas when not set, within
// a hundredth (nodes) or a 128th (bytes) with a floor, and never over a
// tenth of the quota; the master puts them, and the per-principal content
// share, into every command's quota.
func TestQuotaReservesDerived(t *testing.T) {
	for _, c := range []struct {
		l            Limits
		nodes, bytes int64
	}{
		{Limits{}, 10000, 4 << 20},
		{Limits{Nodes: 20000, ContentBytes: 64 << 20}, 200, 1 << 20},
		{Limits{Nodes: 500, ContentBytes: 4 << 20}, 50, 419430},
		{Limits{Nodes: 6, ContentBytes: 1 << 10}, 0, 102},
		{Limits{Nodes: 6, ContentBytes: 1 << 10, NodesAdminReserve: 2, ContentBytesAdminReserve: 10}, 2, 10},
	} {
		l := c.l
		l.setDefaults()
		q := quotaOf(l)
		if q.NodesAdminReserve != c.nodes || q.ContentBytesAdminReserve != c.bytes {
			t.Errorf("%+v: reserves %d nodes, %d bytes; want %d, %d", c.l, q.NodesAdminReserve, q.ContentBytesAdminReserve, c.nodes, c.bytes)
		}
		if err := c.l.Check(); err != nil {
			t.Errorf("%+v: %v", c.l, err)
		}
	}
	var l Limits
	l.setDefaults()
	if q := quotaOf(l); *q != (fsm.Quota{Nodes: 1000000, ContentBytes: 512 << 20, NodesPerPrincipal: 100000,
		ContentBytesPerPrincipal: 64 << 20, NodesAdminReserve: 10000, ContentBytesAdminReserve: 4 << 20}) {
		t.Errorf("the default quota is %+v", *q)
	}
	for _, bad := range []Limits{{Nodes: 10, NodesAdminReserve: 10}, {ContentBytes: 1 << 20, ContentBytesAdminReserve: 2 << 20}} {
		if err := bad.Check(); !errors.Is(err, ErrReserve) {
			t.Errorf("%+v: %v, want ErrReserve", bad, err)
		}
	}
}
