package deploy_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	_ "lockcell/client" // sets testhook.ConnectTarget
	"lockcell/internal/testhook"
)

// TestComposeClientsNeedNoHostsFile checks both ways compose.yaml offers
// clients to reach the cell without /etc/hosts edits: the in-network cli
// service names every replica by its listen address and carries the
// admin's certificate; and the host rule its header documents
// (LOCKCELL_CONNECT_TO) sends each replica's name to a port compose
// publishes on the host's loopback.
func TestComposeClientsNeedNoHostsFile(t *testing.T) {
	top, reps := composeReplicas(t)
	src, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(src), "once /etc/hosts maps") {
		t.Error("compose.yaml still tells clients to edit /etc/hosts")
	}
	var listens []string
	for _, r := range reps {
		listens = append(listens, r.settings["listen"])
	}

	cli := get(top, "services", "cli")
	if ep := strs(cli, "entrypoint"); len(ep) != 1 || !strings.HasSuffix(ep[0], "/lockcell") {
		t.Fatalf("the cli service runs %v, not lockcell", ep)
	}
	got := strings.Split(str(cli, "environment", "LOCKCELL_REPLICAS"), ",")
	slices.Sort(got)
	want := slices.Clone(listens)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the cli service's LOCKCELL_REPLICAS %v, want every replica's listen address %v", got, want)
	}
	for _, k := range []string{"LOCKCELL_CERT", "LOCKCELL_KEY", "LOCKCELL_CA"} {
		if !strings.HasPrefix(str(cli, "environment", k), "/etc/lockcell/tls/") {
			t.Errorf("the cli service's %s is %q, not in the certs volume", k, str(cli, "environment", k))
		}
	}

	m := regexp.MustCompile(`LOCKCELL_CONNECT_TO=(\S+)`).FindSubmatch(src)
	if m == nil {
		t.Fatal("compose.yaml does not document LOCKCELL_CONNECT_TO for clients on the host")
	}
	if _, err := testhook.ConnectTarget(string(m[1]), ""); err != nil {
		t.Fatalf("compose.yaml's LOCKCELL_CONNECT_TO: %v", err)
	}
	for _, r := range reps {
		to, _ := testhook.ConnectTarget(string(m[1]), r.settings["listen"])
		if !slices.Contains(strs(r.svc, "ports"), to+":"+strings.Split(to, ":")[1]) {
			t.Errorf("%s: --connect-to sends %s to %s, which compose does not publish (ports %v)",
				r.service, r.settings["listen"], to, strs(r.svc, "ports"))
		}
	}
}
