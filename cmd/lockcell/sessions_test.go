package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
)

func TestSessionsVerb(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	flags := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}
	cfg := c.ClientConfig()
	cfg.ClientName = "holder-app"
	cfg.Identity = client.Identity{Host: "build-7", PID: 4242, Program: "nightly"}
	holder := c.ClientWith(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := holder.Open(ctx, "/ls/t/job", client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := h.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
		t.Fatal(ok, err)
	}
	r := cliRunner{t, flags}
	out := r.ok("sessions").stdout
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "ID") || len(lines) < 3 {
		t.Fatalf("sessions table:\n%s", out)
	}
	found := false
	for _, l := range lines[1:] {
		if strings.Contains(l, "holder-app") {
			found = true
			if !strings.Contains(l, "/ls/t/job") {
				t.Fatalf("holder's row lacks its lock: %q", l)
			}
			if !strings.Contains(l, " nightly[4242]@build-7 ") {
				t.Fatalf("holder's row lacks its declared identity: %q", l)
			}
		}
	}
	if !found {
		t.Fatalf("holder not listed:\n%s", out)
	}
	var list []admin.SessionInfo
	if err := json.Unmarshal([]byte(r.ok("--json", "sessions").stdout), &list); err != nil || len(list) < 2 {
		t.Fatalf("--json sessions: %v %+v", err, list)
	}
	found = false
	for _, s := range list {
		if s.ID == holder.Session() {
			found = true
			if s.Identity != cfg.Identity || s.Client != "holder-app" {
				t.Fatalf("--json sessions: holder %+v, declared %+v", s, cfg.Identity)
			}
		}
	}
	if !found {
		t.Fatalf("--json sessions: holder %d not listed: %+v", holder.Session(), list)
	}
	r.fails(2, "", "sessions", "extra")
}

// Every verb's --help carries an example.
func TestEveryVerbHelpHasExample(t *testing.T) {
	for _, cmd := range newApp(&env{}).Commands {
		if cmd.Hidden || cmd.Name == "help" {
			continue
		}
		var out, errb strings.Builder
		code := run([]string{"lockcell", cmd.Name, "--help"}, strings.NewReader(""), &out, &errb)
		if code != 0 || !strings.Contains(out.String()+errb.String(), "Example") {
			t.Errorf("%s --help (exit %d) has no example:\n%s%s", cmd.Name, code, out.String(), errb.String())
		}
	}
}
