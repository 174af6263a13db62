package cell

import (
	"crypto/tls"
	"crypto/x509"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"lockcell/buildinfo"
	"lockcell/fsm"
	"lockcell/replica"
)

// The metrics an operator of a consensus store expects beside the call
// counters: the disk, the followers as the master sees them, the
// membership, the build and the certificates' expiry. Each collector
// reads its source once per scrape, and none walks the state machine:
// DiskUsage walks the data folder at most every 5 s, Progress and
// PeerRTT copy a map of at most the members, the certificates are looked
// at only when they change.

// opsCollectors are the collectors of this file, for newMetrics.
func opsCollectors(s *Server, labels prometheus.Labels) []prometheus.Collector {
	return []prometheus.Collector{
		newDiskCollector(s, labels),
		newFollowerCollector(s, labels),
		newMembershipCollector(s, labels),
		newBuildInfoCollector(labels),
		newCertCollector(s, labels),
		newAuditTrailCollector(s, labels),
	}
}

// auditTrailCollector exposes the audit trail's size and health
// (audit.Trail.Stats).
type auditTrailCollector struct {
	rep                 *replica.Replica
	bytes, last, failed *prometheus.Desc
}

func newAuditTrailCollector(s *Server, labels prometheus.Labels) auditTrailCollector {
	return auditTrailCollector{rep: s.rep,
		bytes: prometheus.NewDesc("lockcell_audit_trail_bytes",
			"Bytes of this replica's audit trail on disk (DATA/audit; the oldest records go past --audit-retain).", nil, labels),
		last: prometheus.NewDesc("lockcell_audit_trail_last_index",
			"The command index of the newest record in this replica's audit trail.", nil, labels),
		failed: prometheus.NewDesc("lockcell_audit_trail_failed",
			"1 when this replica's audit trail stopped at a write error (its records from then on are missing here; other replicas hold them), else 0.", nil, labels),
	}
}

func (a auditTrailCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- a.bytes
	ch <- a.last
	ch <- a.failed
}

func (a auditTrailCollector) Collect(ch chan<- prometheus.Metric) {
	st := a.rep.Audit().Stats()
	failed := 0.0
	if st.Err != nil {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(a.bytes, prometheus.GaugeValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(a.last, prometheus.GaugeValue, float64(st.Last))
	ch <- prometheus.MustNewConstMetric(a.failed, prometheus.GaugeValue, failed)
}

// diskCollector exposes replica.DiskUsage.
type diskCollector struct {
	rep                         *replica.Replica
	parts, lastBytes, lastIndex *prometheus.Desc
}

func newDiskCollector(s *Server, labels prometheus.Labels) diskCollector {
	return diskCollector{rep: s.rep,
		parts: prometheus.NewDesc("lockcell_disk_bytes",
			"Bytes this replica keeps on disk, by part: data (the whole data folder), log_store (the Raft log, badger's tables and value log) "+
				"and snapshots (the retained snapshots). Measured at most every 5 s.", []string{"part"}, labels),
		lastBytes: prometheus.NewDesc("lockcell_snapshot_last_bytes",
			"Bytes of the newest snapshot's state (a snapshot over 1 GiB cannot be restored).", nil, labels),
		lastIndex: prometheus.NewDesc("lockcell_snapshot_last_index",
			"The Raft log index the newest snapshot covers (0: none yet).", nil, labels),
	}
}

func (d diskCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- d.parts
	ch <- d.lastBytes
	ch <- d.lastIndex
}

func (d diskCollector) Collect(ch chan<- prometheus.Metric) {
	u := d.rep.DiskUsage()
	ch <- prometheus.MustNewConstMetric(d.parts, prometheus.GaugeValue, float64(u.DataBytes), "data")
	ch <- prometheus.MustNewConstMetric(d.parts, prometheus.GaugeValue, float64(u.LogStoreBytes), "log_store")
	ch <- prometheus.MustNewConstMetric(d.parts, prometheus.GaugeValue, float64(u.SnapshotsBytes), "snapshots")
	ch <- prometheus.MustNewConstMetric(d.lastBytes, prometheus.GaugeValue, float64(u.LastSnapshot))
	ch <- prometheus.MustNewConstMetric(d.lastIndex, prometheus.GaugeValue, float64(u.LastSnapshotIdx))
}

// followerCollector exposes what the master knows of its followers
// (replica.Progress) and the round trips it measured to them
// (replica.PeerRTT). The member label takes the ids of the Raft
// configuration only, so its values are bounded by the cell's size.
type followerCollector struct {
	self              string
	rep               *replica.Replica
	now               func() time.Time
	lag, contact, rtt *prometheus.Desc
	rttKinds          [2]string
	rttPick           [2]func(replica.PeerRTT) fsm.HistogramSnapshot
	rttBounds         []float64
}

func newFollowerCollector(s *Server, labels prometheus.Labels) *followerCollector {
	f := &followerCollector{self: s.cfg.Self, rep: s.rep, now: time.Now,
		lag: prometheus.NewDesc("lockcell_follower_lag_entries",
			"On the master: its last log index minus the follower's highest index known to match (entries the follower has yet to store).",
			[]string{"member"}, labels),
		contact: prometheus.NewDesc("lockcell_follower_last_contact_seconds",
			"On the master: seconds since the follower last answered an AppendEntries or InstallSnapshot (+Inf: not in this term).",
			[]string{"member"}, labels),
		rtt: prometheus.NewDesc("lockcell_peer_rtt_seconds",
			"Round trip of the AppendEntries this replica sent the member while it was master: kind heartbeat (no entries: the network), "+
				"append (entries: the network and the follower's fsync).", []string{"member", "kind"}, labels),
		rttKinds: [2]string{"heartbeat", "append"},
		rttPick: [2]func(replica.PeerRTT) fsm.HistogramSnapshot{
			func(r replica.PeerRTT) fsm.HistogramSnapshot { return r.Heartbeat },
			func(r replica.PeerRTT) fsm.HistogramSnapshot { return r.Append },
		},
	}
	for i := range fsm.HistogramBuckets {
		f.rttBounds = append(f.rttBounds, fsm.HistogramBound(i).Seconds())
	}
	return f
}

func (f *followerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- f.lag
	ch <- f.contact
	ch <- f.rtt
}

func (f *followerCollector) Collect(ch chan<- prometheus.Metric) {
	members := f.rep.Members()
	if f.rep.IsLeader() {
		last := f.rep.Status().LastIndex
		progress := f.rep.Progress()
		now := f.now()
		for _, m := range members {
			if m.ID == f.self {
				continue
			}
			pp, ok := progress[m.ID]
			lag := last - min(pp.Match, last)
			since := math.Inf(1)
			if ok && !pp.LastContact.IsZero() {
				since = max(now.Sub(pp.LastContact).Seconds(), 0)
			}
			ch <- prometheus.MustNewConstMetric(f.lag, prometheus.GaugeValue, float64(lag), m.ID)
			ch <- prometheus.MustNewConstMetric(f.contact, prometheus.GaugeValue, since, m.ID)
		}
	}
	// Round trips stay with the replica that measured them, master or
	// not, so that their counters only grow; members removed since are
	// left out.
	rtts := f.rep.PeerRTT()
	for _, m := range members {
		r, ok := rtts[m.ID]
		if !ok || m.ID == f.self {
			continue
		}
		for i, kind := range f.rttKinds {
			snap := f.rttPick[i](r)
			buckets := make(map[float64]uint64, len(f.rttBounds))
			for j, n := range snap.Buckets {
				buckets[f.rttBounds[j]] = n
			}
			ch <- prometheus.MustNewConstHistogram(f.rtt, snap.Count, snap.Sum.Seconds(), buckets, m.ID, kind)
		}
	}
}

// membershipCollector exposes the Raft configuration this replica knows.
type membershipCollector struct {
	rep             *replica.Replica
	voters, members *prometheus.Desc
}

func newMembershipCollector(s *Server, labels prometheus.Labels) membershipCollector {
	return membershipCollector{rep: s.rep,
		voters: prometheus.NewDesc("lockcell_voters",
			"Voting members in the latest Raft configuration this replica knows (the master's is the cell's).", nil, labels),
		members: prometheus.NewDesc("lockcell_members",
			"Members, voting or not, in the latest Raft configuration this replica knows.", nil, labels),
	}
}

func (m membershipCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.voters
	ch <- m.members
}

func (m membershipCollector) Collect(ch chan<- prometheus.Metric) {
	members := m.rep.Members()
	voters := 0
	for _, mb := range members {
		if mb.Voter {
			voters++
		}
	}
	ch <- prometheus.MustNewConstMetric(m.voters, prometheus.GaugeValue, float64(voters))
	ch <- prometheus.MustNewConstMetric(m.members, prometheus.GaugeValue, float64(len(members)))
}

// newBuildInfoCollector is lockcell_build_info: always 1, the build in
// its labels, so that a rollout shows as the labels changing replica by
// replica.
func newBuildInfoCollector(labels prometheus.Labels) prometheus.Collector {
	b := buildinfo.Read()
	version, commit := b.Version, b.Commit
	if version == "" {
		version = "unknown"
	}
	if commit == "" {
		commit = "unknown"
	} else if b.Modified {
		commit += "-modified"
	}
	all := prometheus.Labels{"version": version, "commit": commit, "go_version": b.Go}
	for k, v := range labels {
		all[k] = v
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "lockcell_build_info",
		Help: "Always 1: the binary's module version, VCS commit (-modified: built from a changed checkout) and Go version.", ConstLabels: all})
	g.Set(1)
	return g
}

// certCollector exposes when the certificates this replica presents, and
// the CAs that signed them, expire: the ones in use at the scrape, so a
// SIGHUP reload (CertReloader) shows at the next scrape. It has no
// samples on a plain cell.
type certCollector struct {
	ports  []certPort
	expiry *prometheus.Desc

	mu    sync.Mutex
	cache map[string]certExpiry // by port
}

// certPort is one port's TLS configuration. The HTTP port presents the
// client port's certificate (httpTLSConfig), so it reads that one.
type certPort struct {
	name string
	cfg  *tls.Config
}

// certExpiry is what was found for one leaf and CA pool: recomputed only
// when either changes, since finding the CA means verifying the chain.
type certExpiry struct {
	der       *byte // the certificate's first byte: the same bytes, the same certificate
	pool      *x509.CertPool
	own, ca   time.Time
	caKnown   bool
	validated bool
}

func newCertCollector(s *Server, labels prometheus.Labels) *certCollector {
	c := &certCollector{cache: map[string]certExpiry{},
		expiry: prometheus.NewDesc("lockcell_certificate_expiry_seconds",
			"When a certificate in use expires (NotAfter, Unix seconds), by port (client, peer, http) and cert: own (the replica's) "+
				"or ca (the earliest-expiring CA certificate of the chain that verifies it). Absent on a plain cell.",
			[]string{"port", "cert"}, labels)}
	if s.cfg.TLS != nil {
		c.ports = append(c.ports, certPort{"client", s.cfg.TLS})
		if s.cfg.MetricsAddr != "" {
			c.ports = append(c.ports, certPort{"http", s.cfg.TLS})
		}
	}
	if s.cfg.PeerTLS != nil {
		c.ports = append(c.ports, certPort{"peer", s.cfg.PeerTLS})
	}
	return c
}

func (c *certCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.expiry }

func (c *certCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.ports {
		e, ok := c.expiryOf(p)
		if !ok {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.expiry, prometheus.GaugeValue, float64(e.own.Unix()), p.name, "own")
		if e.caKnown {
			ch <- prometheus.MustNewConstMetric(c.expiry, prometheus.GaugeValue, float64(e.ca.Unix()), p.name, "ca")
		}
	}
}

// expiryOf reads the certificate and CA pool p's configuration uses now,
// through GetConfigForClient when it has one (a CertReloader's follow
// reloads that way), and finds their expiry.
func (c *certCollector) expiryOf(p certPort) (certExpiry, bool) {
	cfg := p.cfg
	if get := cfg.GetConfigForClient; get != nil {
		if cur, err := get(&tls.ClientHelloInfo{}); err == nil && cur != nil {
			cfg = cur
		}
	}
	var cert *tls.Certificate
	switch {
	case len(cfg.Certificates) > 0:
		cert = &cfg.Certificates[0]
	case cfg.GetCertificate != nil:
		cert, _ = cfg.GetCertificate(&tls.ClientHelloInfo{})
	case cfg.GetClientCertificate != nil:
		cert, _ = cfg.GetClientCertificate(&tls.CertificateRequestInfo{})
	}
	if cert == nil || len(cert.Certificate) == 0 || len(cert.Certificate[0]) == 0 {
		return certExpiry{}, false
	}
	pool := cfg.ClientCAs
	if pool == nil {
		pool = cfg.RootCAs
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	der := &cert.Certificate[0][0]
	if e := c.cache[p.name]; e.validated && e.der == der && e.pool == pool {
		return e, true
	}
	leaf := cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return certExpiry{}, false
		}
	}
	e := certExpiry{der: der, pool: pool, own: leaf.NotAfter, validated: true}
	e.ca, e.caKnown = caExpiry(leaf, cert.Certificate[1:], pool)
	c.cache[p.name] = e
	return e, true
}

// caExpiry is the earliest NotAfter of the CA certificates in the chain
// that verifies leaf against pool. An expired leaf or CA does not verify
// now, yet its expiry is what the operator most needs, so the chain is
// also looked for as of the leaf's validity.
func caExpiry(leaf *x509.Certificate, intermediates [][]byte, pool *x509.CertPool) (time.Time, bool) {
	if pool == nil {
		return time.Time{}, false
	}
	inter := x509.NewCertPool()
	for _, der := range intermediates {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	for _, at := range []time.Time{time.Now(), leaf.NotBefore, leaf.NotAfter} {
		chains, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: at,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		if err != nil || len(chains) == 0 || len(chains[0]) == 0 {
			continue
		}
		cas := chains[0][1:]
		if len(cas) == 0 {
			cas = chains[0] // a self-signed certificate in the pool is its own CA
		}
		earliest := cas[0].NotAfter
		for _, ca := range cas[1:] {
			if ca.NotAfter.Before(earliest) {
				earliest = ca.NotAfter
			}
		}
		return earliest, true
	}
	return time.Time{}, false
}
