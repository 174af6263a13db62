package master

import (
	"strings"
	"testing"

	"lockcell/wire"
)

// The master checks a sequential Open before proposing it: the prefix must
// leave room for the ten digits (invalid name), Sequential needs Create
// (bad request), and a trailing '/' is a fine prefix. What it proposes
// makes the name the reply carries, which is the handle's node.
func TestOpenSequentialChecksAndNamesTheNode(t *testing.T) {
	m := newTestMaster(t)
	sess, _ := m.sessionWithFile(t)
	seq := uint64(1)
	open := func(req *wire.OpenRequest) (*wire.OpenResponse, error) {
		seq++
		resp, err := m.call(sess, seq, wire.MethodOpen, req)
		if err != nil {
			return nil, err
		}
		return resp.(*wire.OpenResponse), nil
	}
	if _, err := open(&wire.OpenRequest{Path: "/ls/c/q", Flags: wire.OpenRead | wire.OpenCreate | wire.OpenDirectory}); err != nil {
		t.Fatal(err)
	}
	create := wire.OpenRead | wire.OpenWrite | wire.OpenCreate | wire.OpenSequential
	for name, c := range map[string]struct {
		req  *wire.OpenRequest
		code wire.Code
	}{
		"no create":        {&wire.OpenRequest{Path: "/ls/c/q/job-", Flags: wire.OpenWrite | wire.OpenSequential}, wire.CodeBadRequest},
		"component length": {&wire.OpenRequest{Path: "/ls/c/q/" + strings.Repeat("x", 246), Flags: create}, wire.CodeInvalidName},
		"name length":      {&wire.OpenRequest{Path: "/ls/c/q/" + strings.Repeat("y/", 505) + "z", Flags: create}, wire.CodeInvalidName},
		"bad character":    {&wire.OpenRequest{Path: "/ls/c/q/job?", Flags: create}, wire.CodeInvalidName},
		"another cell":     {&wire.OpenRequest{Path: "/ls/d/q/job-", Flags: create}, wire.CodeInvalidName},
	} {
		if _, err := open(c.req); codeOf(err) != c.code {
			t.Errorf("%s: %v, want %v", name, err, c.code)
		}
	}
	resp, err := open(&wire.OpenRequest{Path: "/ls/c/q/job-", Flags: create, Contents: []byte("p")})
	if err != nil || resp.Name != "/ls/c/q/job-0000000000" || !resp.Created {
		t.Fatalf("sequential open: %+v %v", resp, err)
	}
	if again, err := open(&wire.OpenRequest{Path: resp.Name, Flags: wire.OpenRead}); err != nil || again.Stat.Instance != resp.Stat.Instance {
		t.Fatalf("the name in the reply opens %+v (%v), not the node made (instance %d)", again, err, resp.Stat.Instance)
	}
	if resp, err = open(&wire.OpenRequest{Path: "/ls/c/q/", Flags: create}); err != nil || resp.Name != "/ls/c/q/0000000001" {
		t.Fatalf("a prefix ending in '/': %+v %v", resp, err)
	}
	if resp, err = open(&wire.OpenRequest{Path: "/ls/c/q/plain", Flags: wire.OpenRead | wire.OpenCreate}); err != nil || resp.Name != "" {
		t.Fatalf("a plain create: %+v %v, want no name in the reply", resp, err)
	}
}
