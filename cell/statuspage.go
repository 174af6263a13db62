package cell

import (
	_ "embed"
	"encoding/json"
	"html/template"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"lockcell/acl"
	"lockcell/fsm"
	"lockcell/replica"
)

// The status page: one server-rendered HTML page (html/template, which
// escapes every name, principal and client name: they are user data) that
// reloads itself every few seconds, and the same facts as JSON for
// scripts. What it shows is read from the replica's own view: its Raft
// state, the replicated state (sessions, locks), and, on the master, the
// lease each session has left, which only the master keeps. Each caller
// sees of it only the names its principal may see (statusFor).

//go:embed statuspage.html
var statusPageHTML string

var statusTemplate = template.Must(template.New("status").Funcs(template.FuncMap{
	"ms": func(d time.Duration) string { return d.Round(time.Millisecond).String() },
}).Parse(statusPageHTML))

// Bounds on what one status page lists, and how often it is computed: the
// sessions and the busiest locks are read from the whole replicated state
// under its read lock, which holds off applies, so any number of viewers
// cost at most one computation per statusEvery.
const (
	statusSessions = 100
	statusLocks    = 10
	statusEvery    = time.Second
	// statusRefresh is how often the page reloads itself.
	statusRefresh = 5
)

// cellStatusPage is what the status page and /status.json show.
type cellStatusPage struct {
	Cell         string        `json:"cell"`
	Self         string        `json:"self"`
	Time         time.Time     `json:"time"`
	State        string        `json:"state"` // this replica's Raft state
	Ready        bool          `json:"ready"`
	ReadyReason  string        `json:"ready_reason"`
	IsMaster     bool          `json:"is_master"`
	Master       *statusMaster `json:"master,omitempty"`
	Epoch        uint64        `json:"epoch"`
	Term         uint64        `json:"term"`
	CommitIndex  uint64        `json:"commit_index"`
	AppliedIndex uint64        `json:"applied_index"`
	Nodes        int           `json:"nodes"`
	LeaseTTL     time.Duration `json:"lease_ttl_ns"`
	// LeaseGranted is the lease KeepAlives grant now: LeaseTTL, or
	// longer under load (master.Config.MaxLeaseTTL).
	LeaseGranted time.Duration   `json:"lease_granted_ns"`
	Replicas     []statusReplica `json:"replicas"`
	SessionCount int             `json:"session_count"`
	Sessions     []statusSession `json:"sessions"`
	Locks        []statusLock    `json:"locks"`
	// Names says which names this caller is shown (statusFor): "all"
	// (the admin), "readable" (its own sessions, the locks it may read)
	// or "none" (counts only); Viewer is its principal, if any, and
	// LocksHidden counts the busiest locks left out for it.
	Names       string `json:"names"`
	Viewer      string `json:"viewer,omitempty"`
	LocksHidden int    `json:"locks_hidden,omitempty"`
	// NamesWhy says on the page why names are left out.
	NamesWhy string `json:"-"`
	Refresh  int    `json:"-"`
}

// What statusFor shows a caller (cellStatusPage.Names).
const (
	statusNamesAll      = "all"
	statusNamesReadable = "readable"
	statusNamesNone     = "none"
)

type statusMaster struct {
	ID         string `json:"id"`
	ClientAddr string `json:"client_addr,omitempty"`
	// StatusURL is the master's status page, assuming it keeps the same
	// distance between client and HTTP ports as this replica (as
	// lockcelld dev does, and a deployment with one port layout on every
	// host); empty on the master itself or when it cannot be guessed.
	StatusURL string `json:"status_url,omitempty"`
}

type statusReplica struct {
	ID         string `json:"id"`
	ClientAddr string `json:"client_addr,omitempty"`
	RaftAddr   string `json:"raft_addr"`
	Role       string `json:"role"` // leader, follower, candidate, unknown, not a member
	Voter      bool   `json:"voter"`
	Self       bool   `json:"self"`
}

type statusSession struct {
	ID        uint64   `json:"id"`
	Client    string   `json:"client,omitempty"`
	Principal string   `json:"principal"`
	Handles   int      `json:"handles"`
	Locks     []string `json:"locks,omitempty"`
	// LeaseLeft is known on the master only.
	LeaseLeft *time.Duration `json:"lease_left_ns,omitempty"`
}

type statusLock struct {
	Name           string     `json:"name"`
	Mode           string     `json:"mode"`
	Holders        int        `json:"holders"`
	Waiters        int        `json:"waiters"`
	Grants         uint64     `json:"grants"` // by this replica's master, recent ones weighing most
	LockGen        uint64     `json:"lock_gen"`
	LockDelayUntil *time.Time `json:"lock_delay_until,omitempty"`
}

// statusGate computes the status at most once per statusEvery, whoever
// asks; callers in between share the last one.
type statusGate struct {
	mu   sync.Mutex
	at   time.Time
	page *cellStatusPage
}

func (g *statusGate) get(compute func() *cellStatusPage) *cellStatusPage {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.page == nil || time.Since(g.at) >= statusEvery {
		g.page, g.at = compute(), time.Now()
	}
	return g.page
}

// statusPage returns the replica's status, at most statusEvery old, with
// every name: statusFor decides what a caller sees of it.
func (s *Server) statusPage() *cellStatusPage { return s.metrics.status.get(s.computeStatus) }

// statusFor is the status as principal may see it ("" for a caller the
// cell could not authenticate), by the rules of the client port's
// listings: the admin sees everything; any other principal the sessions
// of its own principal (as ListSessions shows them) and the locks it may
// read (as ListLocks lists them: the node's read permission); a caller
// without a principal, or any caller with HTTPNamesHidden, counts only.
// The shared page is not changed: the caller gets a copy.
func (s *Server) statusFor(principal string) *cellStatusPage {
	full := s.statusPage()
	p := *full
	p.Viewer = principal
	switch {
	case s.cfg.HTTPNames == HTTPNamesHidden:
		p.Names, p.Sessions, p.Locks, p.LocksHidden = statusNamesNone, nil, nil, len(full.Locks)
		p.NamesWhy = "This replica hides lock names, principals and client names on its HTTP port (--http-names=hidden)."
	case principal == "":
		p.Names, p.Sessions, p.Locks, p.LocksHidden = statusNamesNone, nil, nil, len(full.Locks)
		p.NamesWhy = "Lock names, principals and client names are shown only to a caller with a user certificate of the cell's CA, " +
			"and only what its principal may read."
	case principal == s.cfg.admin():
		p.Names = statusNamesAll
	default:
		p.Names, p.Sessions, p.Locks = statusNamesReadable, nil, nil
		for _, ss := range full.Sessions {
			if ss.Principal == principal {
				p.Sessions = append(p.Sessions, ss)
			}
		}
		s.rep.FSM().Read(func(v fsm.View) error {
			for _, l := range full.Locks {
				if v.Allowed(l.Name, principal, false, acl.Read) == nil {
					p.Locks = append(p.Locks, l)
				}
			}
			return nil
		})
		p.LocksHidden = len(full.Locks) - len(p.Locks)
		p.NamesWhy = "Shown to " + principal + ": its own sessions among the first " + strconv.Itoa(statusSessions) +
			" of the cell, and the busiest locks it may read."
	}
	return &p
}

func (s *Server) computeStatus() *cellStatusPage {
	st := s.rep.Status()
	epoch, _, nodes, _ := s.rep.FSM().Counts()
	isMaster, _ := s.master.Serving()
	ready, why := s.readiness()
	p := &cellStatusPage{Cell: s.cfg.Cell, Self: s.cfg.Self, Time: time.Now().UTC(), State: st.State, Ready: ready, ReadyReason: why,
		IsMaster: isMaster, Epoch: epoch, Term: st.Term, CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, Nodes: nodes,
		Refresh: statusRefresh}
	ms := s.master.Stats()
	p.LeaseTTL, p.LeaseGranted = ms.LeaseTTL, ms.LeaseGranted
	leader, _ := s.rep.Leader()
	if leader != "" {
		// The member table knows members that joined after this
		// process was configured; clientAddrOf falls back to Peers.
		m := &statusMaster{ID: leader, ClientAddr: s.clientAddrOf(leader)}
		if leader != s.cfg.Self {
			m.StatusURL = s.guessStatusURL(m.ClientAddr)
		}
		p.Master = m
	}
	p.Replicas = s.statusReplicas(leader, st.State)
	total, sessions := s.master.SessionStatuses(statusSessions)
	p.SessionCount = total
	for _, ss := range sessions {
		row := statusSession{ID: ss.ID, Client: ss.Client, Principal: ss.Principal, Handles: ss.Handles, Locks: ss.Locks}
		if ss.HasLease {
			left := ss.LeaseLeft
			row.LeaseLeft = &left
		}
		p.Sessions = append(p.Sessions, row)
	}
	p.Locks = s.busiestLocks(p.Time)
	return p
}

// busiestLocks merges the locks most waited for now (the replicated state)
// with those this replica's master granted most often (its memory), and
// keeps the statusLocks first: most waiters, then most grants, then most
// holders.
func (s *Server) busiestLocks(now time.Time) []statusLock {
	fsm := s.rep.FSM()
	views := fsm.BusiestLocks(statusLocks)
	grants := map[string]uint64{}
	var more []string
	for _, g := range s.master.BusiestGrants(statusLocks) {
		grants[g.Name] = g.Grants
		more = append(more, g.Name)
	}
	seen := map[string]bool{}
	var out []statusLock
	for _, l := range append(views, fsm.LockViews(more)...) {
		if seen[l.Path] {
			continue
		}
		seen[l.Path] = true
		row := statusLock{Name: l.Path, Mode: lockModeName(l.Mode), Holders: l.Holders, Waiters: l.Waiters, Grants: grants[l.Path],
			LockGen: l.LockGen}
		if l.LockDelayUntil > 0 {
			if t := time.Unix(0, l.LockDelayUntil); t.After(now) {
				t = t.UTC()
				row.LockDelayUntil = &t
			}
		}
		out = append(out, row)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		switch {
		case a.Waiters != b.Waiters:
			return a.Waiters > b.Waiters
		case a.Grants != b.Grants:
			return a.Grants > b.Grants
		case a.Holders != b.Holders:
			return a.Holders > b.Holders
		}
		return a.Name < b.Name
	})
	return out[:min(statusLocks, len(out))]
}

// statusReplicas lists the configured peers and any other member of the
// Raft configuration, with the role this replica believes each has: it
// knows its own Raft state and the leader; any other member follows when a
// leader is known, and is of unknown role otherwise.
func (s *Server) statusReplicas(leader, selfState string) []statusReplica {
	members := s.rep.Members()
	inRaft := map[string]replica.Member{}
	for _, m := range members {
		inRaft[m.ID] = m
	}
	role := func(id string) string {
		m, ok := inRaft[id]
		switch {
		case !ok && len(members) > 0:
			return "not a member"
		case id == s.cfg.Self:
			return strings.ToLower(selfState)
		case id == leader:
			return "leader"
		case leader != "" && m.Voter:
			return "follower"
		case leader != "":
			return "non-voter"
		}
		return "unknown"
	}
	var out []statusReplica
	seen := map[string]bool{}
	for _, p := range s.cfg.Peers {
		seen[p.ID] = true
		out = append(out, statusReplica{ID: p.ID, ClientAddr: s.clientAddrOf(p.ID), RaftAddr: p.RaftAddr, Role: role(p.ID),
			Voter: inRaft[p.ID].Voter, Self: p.ID == s.cfg.Self})
	}
	for _, m := range members {
		if !seen[m.ID] {
			out = append(out, statusReplica{ID: m.ID, ClientAddr: s.clientAddrOf(m.ID), RaftAddr: m.RaftAddr, Role: role(m.ID),
				Voter: m.Voter, Self: m.ID == s.cfg.Self})
		}
	}
	return out
}

// guessStatusURL is the master's status page if the master's HTTP port
// lies as far from its client port as this replica's does ("" when an
// address does not parse).
func (s *Server) guessStatusURL(masterClient string) string {
	mhost, mport, err1 := net.SplitHostPort(masterClient)
	_, hport, err2 := net.SplitHostPort(s.metricsAddr)
	_, cport, err3 := net.SplitHostPort(s.ClientAddr())
	m, err4 := strconv.Atoi(mport)
	h, err5 := strconv.Atoi(hport)
	c, err6 := strconv.Atoi(cport)
	for _, err := range []error{err1, err2, err3, err4, err5, err6} {
		if err != nil {
			return ""
		}
	}
	port := m + h - c
	if port <= 0 || port > 65535 {
		return ""
	}
	scheme := "http://"
	if s.cfg.TLS != nil {
		scheme = "https://"
	}
	return scheme + net.JoinHostPort(mhost, strconv.Itoa(port)) + "/"
}

func lockModeName(m uint8) string {
	switch m {
	case fsm.LockExclusive:
		return "exclusive"
	case fsm.LockShared:
		return "shared"
	}
	return "free"
}

func (s *Server) serveStatusPage(w http.ResponseWriter, r *http.Request) {
	p := s.statusFor(s.httpPrincipal(r))
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := statusTemplate.Execute(w, p); err != nil {
		s.log.Debug("status page", "err", err)
	}
}

func (s *Server) serveStatusJSON(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s.statusFor(s.httpPrincipal(r))); err != nil {
		s.log.Debug("status json", "err", err)
	}
}
