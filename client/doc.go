// Package client is the library Go programs link to use a lockcell cell:
// a Client holds one session with the cell's master (found from the
// replica list and followed across fail-overs), and Handles behave like
// os.File for the cell's files and directories, which double as
// reader/writer locks. Dial(ctx, cfg) with ConfigFromEnv's cfg connects
// as the lockcell CLI does; Handle.LockContext ends the moment a held
// lock may be lost; Handle.GetSequencer returns the cell-signed bytes
// resource servers check (package sequencer). The Client's doc says how
// names, closing and events behave. Operators' calls (status, health,
// audit, backup, membership, listings) are in package client/admin;
// leader election (Campaign, Leader, Observe, the leader loop Lead) is
// package client/recipe. A process that uses several cells holds a Cells,
// which finds each cell by name (a cells file, DNS SRV records: CellsFile,
// SRVResolver) and routes every name to its own cell's Client.
package client
