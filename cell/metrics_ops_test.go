package cell_test

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/cell/certs"
	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
)

// scrape fetches /metrics from addr with hc (plain HTTP when hc is nil).
func scrape(t *testing.T, hc *http.Client, scheme, addr string) string {
	t.Helper()
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Get(scheme + "://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %d %v", addr, resp.StatusCode, err)
	}
	return string(b)
}

// sample is the value of the series of name whose labels include every
// one of want (name="value" pairs), and whether there is one.
func sample(text, name string, want ...string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest == "" || (rest[0] != '{' && rest[0] != ' ')) {
			continue
		}
		all := true
		for _, w := range want {
			all = all && strings.Contains(rest, w)
		}
		if !all {
			continue
		}
		f := strings.Fields(rest)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		return v, err == nil
	}
	return 0, false
}

// The operator's metrics of a three-replica plain cell, each with a real
// value: the quotas with their limits and how full they are, the disk and
// the newest snapshot, the membership, the build, and, on the master only,
// each follower's lag and last contact (a stopped follower falls behind by
// the writes it misses, and its contact ages) and the round trips to it,
// for the members of the configuration only.
func TestOperatorMetrics(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	servers, m, cl := metricsCell(t, cell.SessionLimits{Nodes: 20, ContentBytes: 1000})
	const rwc = client.Read | client.Write | client.Create
	for i := range 4 {
		mustOpen(t, ctx, cl, fmt.Sprintf("/ls/t/f%d", i), rwc, client.WithContents(make([]byte, 125))).Close()
	}
	// A snapshot, so that the snapshot gauges have one to show.
	if err := m.Replica().Snapshot(); err != nil {
		t.Fatal(err)
	}
	var followers []*cell.Server
	for _, s := range servers {
		if s != m {
			followers = append(followers, s)
		}
	}

	var text string
	pollUntil(t, 20*time.Second, "the master's scrape shows both followers caught up, its snapshot and round trips", func() bool {
		text = scrape(t, nil, "http", m.MetricsAddr())
		for _, f := range followers {
			member := `member="` + f.ID() + `"`
			lag, ok1 := sample(text, "lockcell_follower_lag_entries", member)
			contact, ok2 := sample(text, "lockcell_follower_last_contact_seconds", member)
			rtt, ok3 := sample(text, "lockcell_peer_rtt_seconds_count", member, `kind="heartbeat"`)
			app, ok4 := sample(text, "lockcell_peer_rtt_seconds_count", member, `kind="append"`)
			if !ok1 || !ok2 || !ok3 || !ok4 || lag != 0 || contact > 5 || rtt == 0 || app == 0 {
				return false
			}
		}
		idx, ok := sample(text, "lockcell_snapshot_last_index")
		return ok && idx > 0
	})
	for name, want := range map[string]float64{
		"lockcell_nodes_limit": 20, "lockcell_content_bytes_limit": 1000,
		"lockcell_voters": 3, "lockcell_members": 3,
	} {
		if got, ok := sample(text, name); !ok || got != want {
			t.Errorf("%s = %v (found %v), want %v", name, got, ok, want)
		}
	}
	// Four files below the root of a 20-node quota; 500 of 1000 bytes.
	if got, ok := sample(text, "lockcell_quota_used_ratio", `quota="nodes"`); !ok || got != 0.2 {
		t.Errorf("nodes quota used %v (found %v), want 0.2", got, ok)
	}
	if got, ok := sample(text, "lockcell_quota_used_ratio", `quota="content_bytes"`); !ok || got != 0.5 {
		t.Errorf("content quota used %v (found %v), want 0.5", got, ok)
	}
	data, _ := sample(text, "lockcell_disk_bytes", `part="data"`)
	logStore, _ := sample(text, "lockcell_disk_bytes", `part="log_store"`)
	snaps, _ := sample(text, "lockcell_disk_bytes", `part="snapshots"`)
	last, _ := sample(text, "lockcell_snapshot_last_bytes")
	if logStore <= 0 || snaps <= 0 || last <= 0 || last > snaps || data < logStore+snaps {
		t.Errorf("disk: data %v, log store %v, snapshots %v, newest snapshot %v", data, logStore, snaps, last)
	}
	if got, ok := sample(text, "lockcell_build_info", `go_version="`+runtime.Version()+`"`); !ok || got != 1 {
		t.Errorf("lockcell_build_info with go_version %s: %v (found %v)", runtime.Version(), got, ok)
	}
	if !regexp.MustCompile(`lockcell_build_info\{[^}]*commit="[^"]+"[^}]*version="[^"]+"`).MatchString(text) {
		t.Errorf("lockcell_build_info lacks its commit or version label")
	}
	// Round trips take time: the sum of a member's heartbeats is positive.
	if sum, ok := sample(text, "lockcell_peer_rtt_seconds_sum", `member="`+followers[0].ID()+`"`, `kind="heartbeat"`); !ok || sum <= 0 {
		t.Errorf("heartbeat round trips add up to %v (found %v)", sum, ok)
	}
	if strings.Contains(text, "lockcell_certificate_expiry_seconds{") {
		t.Error("a plain cell shows certificate expiries")
	}
	if strings.Contains(text, `member="`+m.ID()+`"`) {
		t.Error("the master shows itself as a follower")
	}

	// A follower reports the membership but no followers of its own.
	ftext := scrape(t, nil, "http", followers[0].MetricsAddr())
	if v, ok := sample(ftext, "lockcell_voters"); !ok || v != 3 {
		t.Errorf("a follower's lockcell_voters = %v (found %v)", v, ok)
	}
	if strings.Contains(ftext, "lockcell_follower_lag_entries{") || strings.Contains(ftext, "lockcell_follower_last_contact_seconds{") {
		t.Error("a follower reports follower lag")
	}

	// A stopped follower falls behind by every write it misses, and the
	// time since its last contact grows; the other stays caught up.
	gone, live := followers[0], followers[1]
	gone.Close()
	const writes = 5
	for i := range writes {
		mustOpen(t, ctx, cl, fmt.Sprintf("/ls/t/g%d", i), rwc).Close()
	}
	pollUntil(t, 20*time.Second, "the stopped follower's lag and silence", func() bool {
		text = scrape(t, nil, "http", m.MetricsAddr())
		lag, _ := sample(text, "lockcell_follower_lag_entries", `member="`+gone.ID()+`"`)
		contact, _ := sample(text, "lockcell_follower_last_contact_seconds", `member="`+gone.ID()+`"`)
		liveLag, _ := sample(text, "lockcell_follower_lag_entries", `member="`+live.ID()+`"`)
		return lag >= writes && contact >= 1 && !math.IsInf(contact, 1) && liveLag == 0
	})

	// Removed from the cell, the follower leaves the membership counts
	// and every series labelled with it: the member label holds the
	// configuration's members only.
	if _, err := admin.New(cl).RemoveReplica(ctx, gone.ID()); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 20*time.Second, "the removed member's series gone", func() bool {
		text = scrape(t, nil, "http", m.MetricsAddr())
		voters, _ := sample(text, "lockcell_voters")
		members, _ := sample(text, "lockcell_members")
		_, liveOK := sample(text, "lockcell_follower_lag_entries", `member="`+live.ID()+`"`)
		return voters == 2 && members == 2 && liveOK && !strings.Contains(text, `member="`+gone.ID()+`"`)
	})
}

// Certificate expiry on a TLS cell: the replica's own certificate and its
// CA, on each port, as Unix times; a certificate reload shows at the next
// scrape.
func TestCertificateExpiryMetrics(t *testing.T) {
	set := fixtures.TestCerts(t)
	s, rl, anonymous := reloadingReplica(t, set)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: anonymous}}
	defer hc.CloseIdleConnections()
	check := func(own time.Time) {
		t.Helper()
		text := scrape(t, hc, "https", s.MetricsAddr())
		for _, port := range []string{"client", "peer", "http"} {
			for cert, want := range map[string]time.Time{"own": own, "ca": set.CA.Cert.NotAfter} {
				got, ok := sample(text, "lockcell_certificate_expiry_seconds", `port="`+port+`"`, `cert="`+cert+`"`)
				if !ok || got != float64(want.Unix()) {
					t.Errorf("port %s cert %s expires at %v (found %v), want %d", port, cert, got, ok, want.Unix())
				}
			}
		}
	}
	check(rl.Leaf().NotAfter)
	notAfter := time.Now().Add(10 * 24 * time.Hour).Truncate(time.Second)
	fresh, err := set.CA.IssueReplica(s.ID(), certs.WithValidity(time.Now().Add(-time.Hour), notAfter))
	if err != nil {
		t.Fatal(err)
	}
	cf, kf := set.ReplicaFiles(t, s.ID())
	if err := fresh.Write(cf, kf); err != nil {
		t.Fatal(err)
	}
	if err := rl.Reload(); err != nil {
		t.Fatal(err)
	}
	check(notAfter)
}
