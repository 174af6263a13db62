// Package audit is the cell's audit trail on one replica's disk: the
// record format and the segment files a replica appends them to and
// serves them from.
//
// The trail is derived from the replicated log, not written beside it:
// every replica's state machine emits one Record for each mutation it
// applies, numbered by the command's index and stamped with the
// proposing master's clock, so every replica writes the same records in
// the same order and any replica can serve the stream, whichever master
// handled the calls. Nothing of the trail travels in the Raft log but
// what the commands carry anyway (the caller's principal, the proxy it
// called through, its session);
// the write path pays one buffered append per command, flushed once per
// Raft entry.
//
// A replica that installs a snapshot from the master misses the records
// of the entries the snapshot covers: it writes a gap record saying
// which, and another replica holds them. A replica that restarts replays
// the entries after its last snapshot; records it already has are
// skipped (by index), so nothing is written twice.
//
// The package is a leaf: it knows files and records, not the state
// machine.
package audit

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// Record is one audited mutation, as stored (one JSON object a line) and
// as served. Its fields are a stable format: new ones may be added,
// none renamed.
type Record struct {
	// Index is the command index of the mutation: unique and increasing
	// along the trail, the same on every replica.
	Index uint64 `json:"index"`
	// Time is the proposing master's clock when it proposed the command,
	// RFC 3339 in UTC.
	Time string `json:"time"`
	// Op names what was done: create_session, close_session,
	// expire_session, resume_session, create, open, write, delete,
	// acquire, release, grant, break_lock, set_acl, member_put,
	// member_remove, epoch, backup, expire_ttl, txn (a transaction, under
	// its first operation's name); gap for records this replica never saw.
	Op string `json:"op"`
	// Principal is the authenticated caller (empty for the master's own
	// commands: lock-delay hand-offs, expiries, epochs); Admin says it
	// is the cell's admin.
	Principal string `json:"principal,omitempty"`
	Admin     bool   `json:"admin,omitempty"`
	// Proxy is the trusted proxy's principal when the call came through
	// a proxy (lockcelld proxy) that made it on Principal's behalf; empty
	// for a direct call, for the master's own commands, and in records
	// of entries proposed by a version that did not carry it.
	Proxy string `json:"proxy,omitempty"`
	// Session is the caller's session; Client, Host, PID and Program
	// are the identity it declared when it was created.
	Session uint64 `json:"session,omitempty"`
	Client  string `json:"client,omitempty"`
	Host    string `json:"host,omitempty"`
	PID     int64  `json:"pid,omitempty"`
	Program string `json:"program,omitempty"`
	// Name is the node the mutation is about, when there is one.
	Name string `json:"name,omitempty"`
	// Detail says more in a few words: a lock's mode, the ACL names set,
	// a generation, a member id, a gap's extent.
	Detail string `json:"detail,omitempty"`
	// Result is "ok" or the error's kind ("permission", "not_found",
	// "generation_mismatch", ...), with Error its message.
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
}

// OpGap is the Op of a record that stands for records this replica never
// saw: Detail names the indexes, up to and including Index.
const OpGap = "gap"

// TimeOf formats a command's Unix-nanosecond time as Record.Time.
func TimeOf(unixNano int64) string {
	return time.Unix(0, unixNano).UTC().Format(time.RFC3339Nano)
}

// appendLine appends r's JSON line (with its newline) to dst: exactly
// what encoding/json writes for r without HTML escaping
// (TestAppendLineMatchesEncodingJSON), written by hand because the state
// machine's apply goroutine pays for it on every mutation and
// encoding/json's reflection and buffers were most of that cost.
func appendLine(dst []byte, r *Record) []byte {
	dst = append(dst, `{"index":`...)
	dst = strconv.AppendUint(dst, r.Index, 10)
	dst = appendField(dst, "time", r.Time, false)
	dst = appendField(dst, "op", r.Op, false)
	dst = appendField(dst, "principal", r.Principal, true)
	if r.Admin {
		dst = append(dst, `,"admin":true`...)
	}
	dst = appendField(dst, "proxy", r.Proxy, true)
	if r.Session != 0 {
		dst = append(dst, `,"session":`...)
		dst = strconv.AppendUint(dst, r.Session, 10)
	}
	dst = appendField(dst, "client", r.Client, true)
	dst = appendField(dst, "host", r.Host, true)
	if r.PID != 0 {
		dst = append(dst, `,"pid":`...)
		dst = strconv.AppendInt(dst, r.PID, 10)
	}
	dst = appendField(dst, "program", r.Program, true)
	dst = appendField(dst, "name", r.Name, true)
	dst = appendField(dst, "detail", r.Detail, true)
	dst = appendField(dst, "result", r.Result, false)
	dst = appendField(dst, "error", r.Error, true)
	return append(dst, "}\n"...)
}

// appendField appends ,"key":"value" (nothing for an empty value when
// omitEmpty).
func appendField(dst []byte, key, value string, omitEmpty bool) []byte {
	if omitEmpty && value == "" {
		return dst
	}
	dst = append(dst, ',', '"')
	dst = append(dst, key...)
	dst = append(dst, '"', ':')
	return appendString(dst, value)
}

// appendString appends s as a JSON string, escaped as encoding/json does
// without HTML escaping: quote, backslash and control characters, the
// line and paragraph separators, and invalid UTF-8 as U+FFFD.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b >= 0x20 && b != '"' && b != '\\' && b < utf8.RuneSelf {
			i++
			continue
		}
		if b < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xf])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// jsonUnmarshal decodes a stored line (a seam for the reader's filter).
var jsonUnmarshal = json.Unmarshal
