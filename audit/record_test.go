package audit

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// The hand encoder writes exactly what encoding/json writes for a Record
// (no HTML escaping): every field empty or not, and strings with quotes,
// backslashes, control characters, the line separators, multi-byte and
// invalid UTF-8.
func TestAppendLineMatchesEncodingJSON(t *testing.T) {
	pieces := []string{"", "a", "/ls/c/x", `"`, `\`, "\n", "\t", "\r", "\b", "\f", "\x00", "\x1f", "\x7f", "<&>",
		"é", "日本", "\u2028", "\u2029", "\xff", "\xe2\x82", "😀", " ", "x=y"}
	str := func(rng *rand.Rand) string {
		var b bytes.Buffer
		for range rng.IntN(5) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		return b.String()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		r := Record{Index: rng.Uint64() >> rng.IntN(64), Time: str(rng), Op: str(rng), Principal: str(rng),
			Admin: rng.IntN(2) == 0, Proxy: str(rng), Client: str(rng), Host: str(rng), Program: str(rng), Name: str(rng),
			Detail: str(rng), Result: str(rng), Error: str(rng)}
		if rng.IntN(2) == 0 {
			r.Session = rng.Uint64() >> rng.IntN(64)
		}
		if rng.IntN(2) == 0 {
			r.PID = rng.Int64() >> rng.IntN(63)
			if rng.IntN(2) == 0 {
				r.PID = -r.PID
			}
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(&r); err != nil {
			t.Fatal(err)
		}
		if got := appendLine(nil, &r); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("record %+v:\nby hand       %s\nencoding/json %s", r, got, want.Bytes())
		}
	}
}

// BenchmarkAppendLine: one record as the state machine makes it for a write.
func BenchmarkAppendLine(b *testing.B) {
	r := &Record{Index: 123456789, Time: TimeOf(1_700_000_000_123_456_789), Op: "write", Principal: "alice",
		Session: 123456, Client: "lockcell-cli", Host: "host-1", PID: 4242, Program: "worker", Name: "/ls/cell/svc/config",
		Detail: "100 bytes, generation 123456790", Result: "ok"}
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for range b.N {
		buf = appendLine(buf[:0], r)
	}
}
