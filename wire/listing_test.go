package wire

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// encodedSize is the frame payload WriteMessage produces for v.
func encodedSize(t *testing.T, v any) (int, []byte) {
	t.Helper()
	var b bytes.Buffer
	if err := WriteMessage(&b, v); err != nil {
		t.Fatalf("encode %T: %v", v, err)
	}
	return b.Len() - frameHeader, b.Bytes()[frameHeader:]
}

// The largest page the master can build fits a frame with room to spare,
// DirEntrySize bounds every entry's encoding, and the client's decoder
// (with its bounds check) takes both the largest page and the longest
// page of the shortest names.
func TestDirPageFitsAFrame(t *testing.T) {
	for _, name := range []string{"a", strings.Repeat("n", 31), strings.Repeat("n", 32), strings.Repeat("x", 255)} {
		for _, dir := range []bool{false, true} {
			n, _ := encodedSize(t, DirEntry{Name: name, Dir: dir})
			if n > DirEntrySize(name) {
				t.Errorf("entry of a %d-byte name (dir %v) encodes to %d bytes, DirEntrySize says %d", len(name), dir, n, DirEntrySize(name))
			}
		}
	}
	page := func(nameLen int) ReadDirResponse {
		r := ReadDirResponse{Cacheable: true, More: true}
		used := 0
		for i := 0; len(r.Entries) < MaxDirPage; i++ {
			p := fmt.Sprintf("%08d", i)
			name := p + strings.Repeat("x", nameLen-len(p))
			if used+DirEntrySize(name) > DirPageBytes && len(r.Entries) > 0 {
				break
			}
			r.Entries = append(r.Entries, DirEntry{Name: name, Dir: true})
			used += DirEntrySize(name)
		}
		return r
	}
	for _, nameLen := range []int{8, 255} {
		r := page(nameLen)
		n, b := encodedSize(t, r)
		if n > MaxFrameSize/2 {
			t.Errorf("a full page of %d %d-byte names encodes to %d bytes: too close to the frame limit %d", len(r.Entries), nameLen, n, MaxFrameSize)
		}
		var back ReadDirResponse
		if err := Decode(b, &back); err != nil || len(back.Entries) != len(r.Entries) || !back.More {
			t.Errorf("decoding a page of %d %d-byte names: %d entries, %v", len(r.Entries), nameLen, len(back.Entries), err)
		}
		t.Logf("a full page of %d-byte names: %d entries, %d bytes", nameLen, len(r.Entries), n)
	}
}
