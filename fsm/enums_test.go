package fsm

import (
	"strings"
	"testing"
)

// TestPersistedEnumValues pins every number the replica writes into Raft
// entries, snapshots and backups. A log or snapshot written by one version
// is read by the next, so these numbers never change: a failure here means
// a constant was renumbered, which would make old entries mean something
// else. New values take new numbers.
func TestPersistedEnumValues(t *testing.T) {
	type pin struct {
		name      string
		got, want uint64
	}
	pins := []pin{
		// Command types: the first field of every entry.
		{"CmdEpoch", uint64(CmdEpoch), 1},
		{"CmdCreateSession", uint64(CmdCreateSession), 2},
		{"CmdCloseSession", uint64(CmdCloseSession), 3},
		{"CmdOpen", uint64(CmdOpen), 4},
		{"CmdClose", uint64(CmdClose), 5},
		{"CmdSetContents", uint64(CmdSetContents), 6},
		{"CmdDelete", uint64(CmdDelete), 7},
		{"CmdAcquire", uint64(CmdAcquire), 8},
		{"CmdRelease", uint64(CmdRelease), 9},
		{"CmdCancelWait", uint64(CmdCancelWait), 10},
		{"CmdGrant", uint64(CmdGrant), 11},
		{"CmdCellKey", uint64(CmdCellKey), 12},
		{"CmdSetACL", uint64(CmdSetACL), 13},
		{"CmdMembersSeed", uint64(CmdMembersSeed), 14},
		{"CmdMemberPut", uint64(CmdMemberPut), 15},
		{"CmdMemberRemove", uint64(CmdMemberRemove), 16},
		{"CmdBreakLock", uint64(CmdBreakLock), 17},
		{"CmdResumeSession", uint64(CmdResumeSession), 20},
		{"CmdOpenSequential", uint64(CmdOpenSequential), 21},
		{"CmdTxn", uint64(CmdTxn), 22},
		{"CmdExpireTTL", uint64(CmdExpireTTL), 23},
		{"CmdOpenLifetime", uint64(CmdOpenLifetime), 24},
		{"CmdIdleCloseSession", uint64(CmdIdleCloseSession), 25},
		{"CmdSetACLIfGen", uint64(CmdSetACLIfGen), 26},
		{"CmdOpenSemaphore", uint64(CmdOpenSemaphore), 27},
		{"CmdAcquireMulti", uint64(CmdAcquireMulti), 28},
		{"CmdReleaseMulti", uint64(CmdReleaseMulti), 29},
		{"CmdReadReplicaPut", uint64(CmdReadReplicaPut), 30},
		{"TxnCheckExists", uint64(TxnCheckExists), 1},
		{"TxnCheckMissing", uint64(TxnCheckMissing), 2},
		{"TxnCheckGeneration", uint64(TxnCheckGeneration), 3},
		{"TxnCheckHeld", uint64(TxnCheckHeld), 4},
		{"TxnCheckSequencer", uint64(TxnCheckSequencer), 5},
		{"TxnOpCreate", uint64(TxnOpCreate), 1},
		{"TxnOpCreateDir", uint64(TxnOpCreateDir), 2},
		{"TxnOpSet", uint64(TxnOpSet), 3},
		{"TxnOpDelete", uint64(TxnOpDelete), 4},
		// Error kinds: stored with de-duplicated results in snapshots.
		{"KindNone", uint64(KindNone), 0},
		{"KindNotFound", uint64(KindNotFound), 1},
		{"KindExists", uint64(KindExists), 2},
		{"KindNotDir", uint64(KindNotDir), 3},
		{"KindIsDir", uint64(KindIsDir), 4},
		{"KindNotEmpty", uint64(KindNotEmpty), 5},
		{"KindGenerationMismatch", uint64(KindGenerationMismatch), 6},
		{"KindLockHeld", uint64(KindLockHeld), 7},
		{"KindNotHeld", uint64(KindNotHeld), 8},
		{"KindHandleInvalid", uint64(KindHandleInvalid), 9},
		{"KindSessionExpired", uint64(KindSessionExpired), 10},
		{"KindDuplicate", uint64(KindDuplicate), 11},
		{"KindBadRequest", uint64(KindBadRequest), 12},
		{"KindLockDelay", uint64(KindLockDelay), 13},
		{"KindPermission", uint64(KindPermission), 14},
		{"KindCanceled", uint64(KindCanceled), 15},
		{"KindStaleSequencer", uint64(KindStaleSequencer), 16},
		{"KindQuotaExceeded", uint64(KindQuotaExceeded), 17},
		// Lock modes: in entries, nodes, holders and waiters.
		{"LockFree", uint64(LockFree), 0},
		{"LockExclusive", uint64(LockExclusive), 1},
		{"LockShared", uint64(LockShared), 2},
		// A permit's mode: in signed sequencers only (never in entries).
		{"LockPermit", uint64(LockPermit), 3},
		// Open flags: in entries and handles.
		{"FlagRead", uint64(FlagRead), 1},
		{"FlagWrite", uint64(FlagWrite), 2},
		{"FlagCreate", uint64(FlagCreate), 4},
		{"FlagExcl", uint64(FlagExcl), 8},
		{"FlagDirectory", uint64(FlagDirectory), 16},
		{"FlagEphemeral", uint64(FlagEphemeral), 32},
		{"FlagSequential", uint64(FlagSequential), 64},
		{"FlagContainer", uint64(FlagContainer), 128},
		// Format versions.
		{"commandV1", uint64(commandV1), 1},
		{"commandVersion", uint64(commandVersion), 2},
		{"snapshotVersion", uint64(snapshotVersion), 9},
		{"snapshotV7", uint64(snapshotV7), 7},
		{"snapshotV5", uint64(snapshotV5), 5},
		{"snapshotV6", uint64(snapshotV6), 6},
		{"snapshotV4", uint64(snapshotV4), 4},
		{"snapshotV3", uint64(snapshotV3), 3},
		{"BackupFormat", uint64(BackupFormat), 1},
	}
	for _, p := range pins {
		if p.got != p.want {
			t.Errorf("%s is %d; persisted as %d", p.name, p.got, p.want)
		}
	}
	// Every command type has a name (log lines and errors name them).
	for ty := CmdEpoch; ty <= CmdBreakLock; ty++ {
		if strings.HasPrefix(ty.String(), "CmdType(") {
			t.Errorf("command type %d has no name", ty)
		}
	}
}
