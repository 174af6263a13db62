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
