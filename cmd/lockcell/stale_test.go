package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"lockcell/fixtures"
)

// lockcell cat and stat --max-staleness: the read may be answered by a
// follower, and --json says who answered; the contents are the file's.
func TestStaleReadVerbs(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	m := c.WaitForMaster(30 * time.Second)
	r := cliRunner{t, []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}}
	r.ok("put", "c/x", "hello")
	type readJS struct {
		Replica  string `json:"replica"`
		Follower bool   `json:"follower"`
	}
	var follower bool
	for end := time.Now().Add(20 * time.Second); !follower; {
		if time.Now().After(end) {
			t.Fatal("no follower answered lockcell cat --max-staleness within 20s")
		}
		var js struct {
			Contents string  `json:"contents"`
			Read     *readJS `json:"read"`
		}
		out := r.ok("cat", "c/x", "--max-staleness", "2s", "--json").stdout
		if err := json.Unmarshal([]byte(out), &js); err != nil || js.Contents != "hello" || js.Read == nil {
			t.Fatalf("cat --max-staleness --json: %q (%v)", out, err)
		}
		if js.Read.Follower && js.Read.Replica == c.Server(m).ID() {
			t.Fatalf("the master answered as a follower: %q", out)
		}
		follower = js.Read.Follower
	}
	if got := r.ok("cat", "--max-staleness", "2s", "c/x").stdout; got != "hello" {
		t.Fatalf("cat --max-staleness printed %q", got)
	}
	var st struct {
		Name string  `json:"name"`
		Read *readJS `json:"read"`
	}
	out := r.ok("--json", "stat", "--max-staleness", "2s", "c/x").stdout
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Name != "/ls/t/c/x" || st.Read == nil {
		t.Fatalf("stat --max-staleness --json: %q (%v)", out, err)
	}
}

// lockcell replica add --read-replica adds a member that list shows as a
// read replica, which add does not wait to see vote.
func TestReplicaAddReadReplica(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	r := cliRunner{t, []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "30s"}}
	_, p := c.StartJoiner("r1", nil)
	out := r.ok("replica", "add", "--read-replica", "r1", p.ClientAddr, p.RaftAddr).stdout
	if !strings.Contains(out, "read-replica") || !strings.Contains(out, "3 voters") {
		t.Fatalf("replica add --read-replica printed:\n%s", out)
	}
	var list struct {
		Replicas []struct {
			ID       string `json:"id"`
			Suffrage string `json:"suffrage"`
			Role     string `json:"role"`
		} `json:"replicas"`
	}
	js := r.ok("--json", "replica", "list").stdout
	if err := json.Unmarshal([]byte(js), &list); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range list.Replicas {
		if m.ID == "r1" {
			found = m.Suffrage == "nonvoter" && m.Role == "read-replica"
		}
	}
	if !found {
		t.Fatalf("replica list --json: %s", js)
	}
}
