package cell_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
)

// TestHealthDetailMonitorRole: the health detail of CellStatus (disk
// usage, and from the master each member's last contact and match index)
// goes to the admin and to the principals listed in acl/monitor, and to
// nobody else, whose refusal is typed and names the file; plain status
// stays open to everyone. The monitor role may list the replicas, and
// still not change them.
func TestHealthDetailMonitorRole(t *testing.T) {
	set := fixtures.TestCerts(t, "mon", "alice")
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: set, LeaseTTL: 4 * time.Second})
	m := c.WaitForMaster(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	monCfg, aliceCfg, adminCfg := c.ClientConfigAs("mon"), c.ClientConfigAs("alice"), c.ClientConfig()
	masterAddr := c.Addrs()[m]
	const file = "/ls/t/acl/monitor"

	denied := func(cfg client.Config, who string) {
		t.Helper()
		_, err := lcadmin.QueryStatusDetail(ctx, cfg, masterAddr)
		if !errors.Is(err, client.ErrPermission) || !strings.Contains(err.Error(), file) {
			t.Fatalf("%s asks for the detail: %v; want ErrPermission naming %s", who, err, file)
		}
		if st, err := lcadmin.QueryStatusWith(ctx, cfg, masterAddr); err != nil || st.Detail || st.Disk != nil {
			t.Fatalf("%s asks for the plain status: %+v, %v; want it without the detail", who, st, err)
		}
	}
	// No monitor file yet: nobody but the admin has the role.
	denied(monCfg, "mon before acl/monitor exists")

	admin := c.ClientWith(t, adminCfg)
	for _, name := range []string{"acl", "acl/monitor"} {
		mode := client.Read | client.Write | client.Create
		opts := []client.OpenOption{client.WithContents([]byte("# health probes\nmon\n"))}
		if name == "acl" {
			mode, opts = mode|client.Directory, nil
		}
		h, err := admin.Open(ctx, c.Name(name), mode, opts...)
		if err != nil {
			t.Fatalf("admin creates %s: %v", name, err)
		}
		h.Close()
	}
	denied(aliceCfg, "alice, not listed")

	// mon gets the detail from every replica (a follower once it has
	// applied the file), with real disk figures; the master's answer
	// also carries its view of every other member.
	for i, addr := range c.Addrs() {
		var st *lcadmin.CellStatus
		var err error
		deadline := time.Now().Add(20 * time.Second)
		for {
			st, err = lcadmin.QueryStatusDetail(ctx, monCfg, addr)
			if err == nil && (i != m || contactsKnown(st)) || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("mon asks replica %d for the detail: %v", i, err)
		}
		if !st.Detail || st.Disk == nil || st.Disk.DataBytes <= 0 || st.Disk.LogStoreBytes <= 0 ||
			st.Disk.LogStoreBytes > st.Disk.DataBytes || st.Disk.SnapshotsBytes > st.Disk.DataBytes {
			t.Fatalf("replica %d's detail: %+v, disk %+v; want data and log store sizes > 0, the log within the data", i, st, st.Disk)
		}
		if i != m {
			continue
		}
		for _, r := range st.Replicas {
			if r.Master {
				if r.ID != st.Self || !r.Healthy {
					t.Fatalf("master's own row %+v in %+v", r, st)
				}
				continue
			}
			if !r.Healthy || r.LastContact <= 0 || r.LastContact > 10*time.Second || r.MatchIndex == 0 || r.MatchIndex > st.CommitIndex+1 {
				t.Fatalf("master's view of replica %s: %+v (commit index %d)", r.ID, r, st.CommitIndex)
			}
		}
	}

	// The monitor role lists the members but changes nothing.
	mon := c.ClientWith(t, monCfg)
	list, err := lcadmin.New(mon).Replicas(ctx)
	if err != nil || len(list.Replicas) != 3 || list.Voters() != 3 {
		t.Fatalf("mon lists the replicas: %+v, %v", list, err)
	}
	if _, err := lcadmin.New(mon).RemoveReplica(ctx, list.Replicas[0].ID); !errors.Is(err, client.ErrPermission) {
		t.Fatalf("mon removes a replica: %v; want ErrPermission", err)
	}
	alice := c.ClientWith(t, aliceCfg)
	if _, err := lcadmin.New(alice).Replicas(ctx); !errors.Is(err, client.ErrPermission) || !strings.Contains(err.Error(), file) {
		t.Fatalf("alice lists the replicas: %v; want ErrPermission naming %s", err, file)
	}
}

// contactsKnown reports whether the master's answer has heard from every
// other member in its term.
func contactsKnown(st *lcadmin.CellStatus) bool {
	for _, r := range st.Replicas {
		if !r.Master && (r.LastContact <= 0 || r.MatchIndex == 0) {
			return false
		}
	}
	return len(st.Replicas) > 0
}
