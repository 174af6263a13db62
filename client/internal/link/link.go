// Package link gives package client/admin the client's internals without
// exporting them from package client: package client sets these
// variables in an init function (the pattern of grpc-go's internal
// package), so they are set in every program that can name a
// *client.Client. The client travels as any because this package cannot
// import client (client imports it); each function asserts it back.
package link

import (
	"context"

	"lockcell/cache"
	"lockcell/wire"
)

var (
	// Call makes one call of method m through the client's session to
	// the master, with the client's retries, routing and request ids
	// (mutating: the call changes the cell and so carries a sequence
	// number). It is (*client.Client).call.
	Call func(c any, ctx context.Context, m wire.Method, mutating bool, req, resp any) error

	// CallReplica makes one session-less call of method m to the replica
	// at addr itself, master or not, over a connection of its own made as
	// cfg (a client.Config) says. It is client's callReplica.
	CallReplica func(ctx context.Context, cfg any, addr string, m wire.Method, req, resp any) error

	// Learn makes the client adopt addrs, the master's own list of its
	// members' client addresses, as the replicas it tries.
	Learn func(c any, addrs []string)

	// Abs resolves name against the client's cell as client.ResolveName.
	Abs func(c any, name string) string

	// Master returns the address of the replica the client believes is
	// master.
	Master func(c any) string

	// ReplicaAddrs returns the addresses the client tries when it looks
	// for a master.
	ReplicaAddrs func(c any) []string

	// CacheStats reports the client cache's counters.
	CacheStats func(c any) cache.Stats
)
