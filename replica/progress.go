package replica

import (
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"lockcell/fsm"
)

// Follower progress. hashicorp/raft v1.8 keeps each follower's match index
// and last contact inside its replication goroutines and exposes neither,
// yet the master needs both to promote a non-voter only once it has
// caught up and to refuse a membership change that would leave the
// healthy voters short of a quorum. Every AppendEntries (heartbeats
// included) and InstallSnapshot the leader sends goes through the
// transport, so a thin wrapper around it (built-in or injected) records
// what each answer proves.

// progress records PeerProgress by server id, and the round trips of
// the AppendEntries this replica sent each follower as leader.
type progress struct {
	mu    sync.Mutex
	peers map[raft.ServerID]fsm.PeerProgress
	rtt   map[raft.ServerID]*peerRTT
	// heard is, per follower, the send time of the newest request of a
	// term that the follower answered in that term (VerifyLeader's
	// evidence, leader.go).
	heard map[raft.ServerID]heardMark
	now   func() time.Time
	// onContact, if set, hears of every answered AppendEntries or
	// InstallSnapshot (outside mu): the raft log adapter ends a peer's
	// run of failure lines with it.
	onContact func(id, addr string)
}

func newProgress() *progress {
	return &progress{peers: map[raft.ServerID]fsm.PeerProgress{}, rtt: map[raft.ServerID]*peerRTT{}, heard: map[raft.ServerID]heardMark{}, now: time.Now}
}

// heardMark says a follower answered, in term, a request sent at sent.
type heardMark struct {
	term uint64
	sent time.Time
}

// peerRTT is one follower's round trips. It is made once per member and
// then only counted into (Histogram is lock-free), so a heartbeat costs
// no allocation.
type peerRTT struct {
	heartbeat, append fsm.Histogram
}

// PeerRTT is the round trips of the AppendEntries this replica sent one
// follower while it led, answered ones only, since the follower became
// known to it (a member removed and added again starts over).
type PeerRTT struct {
	// Heartbeat times the AppendEntries that carried no entries
	// (heartbeats and probes): the network both ways and the follower's
	// handling, no disk write.
	Heartbeat fsm.HistogramSnapshot
	// Append times those that carried entries: the follower stores and
	// fsyncs them before it answers, so this adds its disk to the
	// network.
	Append fsm.HistogramSnapshot
}

// appended records the answer to an AppendEntries sent at sent in
// args.Term, which took took from sending to the answer.
func (p *progress) appended(id raft.ServerID, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, sent time.Time, took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if resp.Term == args.Term {
		// The follower still followed this term when it handled a request
		// sent at sent, so it had voted for no later one by then.
		if h := p.heard[id]; h.term != args.Term || sent.After(h.sent) {
			p.heard[id] = heardMark{term: args.Term, sent: sent}
		}
	}
	h := p.rtt[id]
	if h == nil {
		h = &peerRTT{}
		p.rtt[id] = h
	}
	if len(args.Entries) == 0 {
		h.heartbeat.Observe(took)
	} else {
		h.append.Observe(took)
	}
	if resp.Term > args.Term {
		return // the follower knows a newer leader: nothing to credit
	}
	pp := p.peers[id]
	if pp.Term != args.Term {
		pp = fsm.PeerProgress{Term: args.Term}
	}
	pp.LastContact = p.now()
	pp.LastLog = resp.LastLog
	if resp.Success {
		end := args.PrevLogEntry
		if n := len(args.Entries); n > 0 {
			end = args.Entries[n-1].Index
		}
		// A heartbeat carries no entries and no previous entry: it proves
		// contact, not a match.
		if len(args.Entries) > 0 || args.PrevLogEntry > 0 {
			pp.Match = max(pp.Match, end)
		}
	}
	p.peers[id] = pp
}

// installed records a successful InstallSnapshot sent in term.
func (p *progress) installed(id raft.ServerID, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse) {
	if !resp.Success || resp.Term > args.Term {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	pp := p.peers[id]
	if pp.Term != args.Term {
		pp = fsm.PeerProgress{Term: args.Term}
	}
	pp.LastContact = p.now()
	pp.Match = max(pp.Match, args.LastLogIndex)
	pp.LastLog = max(pp.LastLog, args.LastLogIndex)
	p.peers[id] = pp
}

// contacted tells onContact that id, at target, answered.
func (p *progress) contacted(id raft.ServerID, target raft.ServerAddress) {
	if p.onContact != nil {
		p.onContact(string(id), string(target))
	}
}

// forget drops what was learnt of id: a member removed, or added again
// (perhaps on an empty disk), proves nothing by its old answers.
func (p *progress) forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.peers, raft.ServerID(id))
	delete(p.rtt, raft.ServerID(id))
	delete(p.heard, raft.ServerID(id))
}

// heardSince reports whether a quorum of voters followed term at or after
// since: the leader itself (self), and every other voter that answered, in
// term, a request sent at or after since.
func (p *progress) heardSince(voters []raft.ServerID, self raft.ServerID, term uint64, since time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, id := range voters {
		if id == self {
			n++
			continue
		}
		if h, ok := p.heard[id]; ok && h.term == term && !h.sent.Before(since) {
			n++
		}
	}
	return n > len(voters)/2
}

// snapshot returns the records of term.
func (p *progress) snapshot(term uint64) map[string]fsm.PeerProgress {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]fsm.PeerProgress, len(p.peers))
	for id, pp := range p.peers {
		if pp.Term == term {
			out[string(id)] = pp
		}
	}
	return out
}

// rttSnapshot reads every follower's round trips.
func (p *progress) rttSnapshot() map[string]PeerRTT {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]PeerRTT, len(p.rtt))
	for id, h := range p.rtt {
		out[string(id)] = PeerRTT{Heartbeat: h.heartbeat.Snapshot(), Append: h.append.Snapshot()}
	}
	return out
}

// tracked is a Raft transport whose leader-side replication calls are
// recorded in a progress. It also refuses pipelined replication, for the
// reason unpipelined gives and so that every append passes through here.
type tracked struct {
	raft.Transport
	p *progress
	// watch learns the leader's commit index from the appends this
	// replica receives (freshness.go); wc forwards them to raft.
	watch *commitWatch
	wc    *watchedConsumer
}

// Consumer returns the incoming RPCs, each AppendEntries shown to the
// commit watch on its way to raft.
func (t *tracked) Consumer() <-chan raft.RPC { return t.consumer() }

// trackedPreVote is tracked for a transport that offers pre-vote: raft
// asks the transport itself whether it does, so the wrapper must not hide
// it, nor claim it for a transport without it.
type trackedPreVote struct {
	tracked
	pv raft.WithPreVote
}

// track wraps t so that p records follower progress.
func track(t raft.Transport, p *progress, w *commitWatch) raft.Transport {
	base := tracked{Transport: t, p: p, watch: w, wc: &watchedConsumer{done: make(chan struct{})}}
	if pv, ok := t.(raft.WithPreVote); ok {
		return &trackedPreVote{tracked: base, pv: pv}
	}
	return &base
}

// AppendEntries sends the RPC and records the answer and its round trip
// (two clock reads: raft's replication calls this synchronously, one RPC
// at a time per follower, so the time is the RPC's own).
func (t *tracked) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	start := time.Now()
	err := t.Transport.AppendEntries(id, target, args, resp)
	if err == nil {
		t.p.appended(id, args, resp, start, time.Since(start))
		t.p.contacted(id, target)
	}
	return err
}

// InstallSnapshot sends the snapshot and records the answer.
func (t *tracked) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	err := t.Transport.InstallSnapshot(id, target, args, resp, data)
	if err == nil {
		t.p.installed(id, args, resp)
		t.p.contacted(id, target)
	}
	return err
}

// AppendEntriesPipeline tells raft to replicate without a pipeline.
func (t *tracked) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// Close closes the wrapped transport, when it can be closed.
func (t *tracked) Close() error {
	t.wc.close()
	if c, ok := t.Transport.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// RequestPreVote forwards to the wrapped transport.
func (t *trackedPreVote) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.pv.RequestPreVote(id, target, args, resp)
}

// Progress returns what this replica, as leader, last learnt of each
// follower in its current term, by server id: empty on a follower, and
// for a follower the leader has not heard from this term. It does not wait
// on raft's loops.
func (r *Replica) Progress() map[string]fsm.PeerProgress {
	return r.progress.snapshot(r.raft.CurrentTerm())
}

// PeerRTT returns the AppendEntries round trips this replica measured to
// each follower while it led, by server id: members it never led are
// absent, and a removed member's are dropped. Unlike Progress it keeps
// the figures across terms, so they only grow (Prometheus histograms).
func (r *Replica) PeerRTT() map[string]PeerRTT {
	return r.progress.rttSnapshot()
}
