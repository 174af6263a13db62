package fsm

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"lockcell/codec"
)

// A snapshot spanning many chunks has the bytes the contiguous encoder
// wrote before snapshots were chunked (so existing snapshots and backups
// restore, and replicas of either kind agree on state hashes), restores to
// the same state, and StateHash is the SHA-256 of exactly those bytes.
func TestSnapshotChunksKeepTheByteFormat(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath("d"), Flags: fsmtRWC | FlagDirectory}})
	pad := strings.Repeat("x", 200)
	for i := range 3000 {
		r := h.open(s, fmt.Sprintf("d/%05d-%s", i, pad), fsmtRWC)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if i%3 == 0 {
			h.set(s, r.Handle, strings.Repeat("c", i%700))
		}
		if i%5 != 0 {
			h.closeH(s, r.Handle)
		}
	}
	got := h.snapshot()
	if len(got) < 3*snapshotChunkSize {
		t.Fatalf("the state encodes in %d bytes, less than three chunks: the test covers no chunk boundary", len(got))
	}

	// The contiguous encoding of the same image, as it was written before.
	h.f.mu.RLock()
	img := h.f.copyLocked()
	h.f.mu.RUnlock()
	var contiguous bytes.Buffer
	if err := encodeImage(&contiguous, img); err != nil {
		t.Fatal(err)
	}
	want := contiguous.Bytes()
	var plain bytes.Buffer
	h.f.mu.RLock()
	err := h.f.writeStateLocked(&plain)
	h.f.mu.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) || !bytes.Equal(plain.Bytes(), want) {
		t.Fatalf("chunked snapshot (%d bytes) or streamed encoding (%d bytes) differs from the contiguous encoding (%d bytes)",
			len(got), plain.Len(), len(want))
	}

	idx, sum, err := h.f.StateHash()
	if err != nil {
		t.Fatal(err)
	}
	if idx != h.idx || sum != sha256.Sum256(got) {
		t.Fatalf("StateHash = %d %x, want %d %x (the snapshot's bytes)", idx, sum, h.idx, sha256.Sum256(got))
	}

	f2, err := fsmtRestore(t, fsmtCell, got)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if again := fsmtSnapshotBytes(t, f2); !bytes.Equal(again, got) {
		t.Fatal("the restored state snapshots to other bytes")
	}
	if _, sum2, _ := f2.StateHash(); sum2 != sum {
		t.Fatal("the restored state hashes differently")
	}
}

// chunkBuffer holds exactly what was written, through every write method,
// and writeRange gives back any range of it.
func TestChunkBufferRanges(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var b chunkBuffer
	var want bytes.Buffer
	for want.Len() < 3*snapshotChunkSize+1234 {
		switch rng.Intn(3) {
		case 0:
			p := make([]byte, rng.Intn(100_000))
			rng.Read(p)
			b.Write(p)
			want.Write(p)
		case 1:
			s := strings.Repeat(string(rune('a'+rng.Intn(26))), rng.Intn(5000))
			b.WriteString(s)
			want.WriteString(s)
		default:
			c := byte(rng.Intn(256))
			b.WriteByte(c)
			want.WriteByte(c)
		}
	}
	if b.Len() != want.Len() || !bytes.Equal(b.Bytes(), want.Bytes()) {
		t.Fatalf("holds %d bytes, want %d", b.Len(), want.Len())
	}
	for _, c := range b.chunks[:len(b.chunks)-1] {
		if len(c) != snapshotChunkSize || cap(c) != snapshotChunkSize {
			t.Fatalf("a chunk of len %d cap %d before the last, want %d", len(c), cap(c), snapshotChunkSize)
		}
	}
	for range 200 {
		from := rng.Intn(want.Len() + 1)
		to := from + rng.Intn(want.Len()-from+1)
		var out bytes.Buffer
		if err := b.writeRange(&out, from, to); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), want.Bytes()[from:to]) {
			t.Fatalf("writeRange(%d, %d) gives %d bytes that differ", from, to, out.Len())
		}
	}
}

// Node's hand-written encoding is msgpack's reflection encoding byte for
// byte, for every field empty or set (values of every width), alone and
// inside the snapshot's array; and it is the one in use: a field added to
// Node must be added to EncodeMsgpack (and nodeTags) too.
func TestNodeEncodingMatchesReflection(t *testing.T) {
	if !nodeByHand {
		t.Fatalf("Node's fields are not those EncodeMsgpack writes, so snapshots fall back to reflection:\n got %s\nwant %s",
			codec.FieldTags(reflect.TypeFor[Node]()), nodeTags)
	}
	rng := rand.New(rand.NewSource(2))
	uints := []uint64{0, 1, 127, 128, 255, 256, 65535, 65536, 1 << 32, 1<<64 - 1}
	ints := []int64{0, 1, -1, -32, -33, 127, -128, -129, 1 << 40, -1 << 40, 1<<63 - 1, -1 << 63}
	strs := []string{"", "a", strings.Repeat("s", 31), strings.Repeat("s", 32), strings.Repeat("s", 300), strings.Repeat("s", 70000)}
	var nodes []*Node
	for i := range 400 {
		n := &Node{}
		v := reflect.ValueOf(n).Elem()
		for j := range v.NumField() {
			f := v.Field(j)
			if !v.Type().Field(j).IsExported() || (i > 0 && rng.Intn(2) == 0) {
				continue // the first node has every field set
			}
			switch f.Kind() {
			case reflect.String:
				f.SetString(strs[1+rng.Intn(len(strs)-1)])
			case reflect.Bool:
				f.SetBool(true)
			case reflect.Uint64, reflect.Uint32, reflect.Uint8:
				u := uints[rng.Intn(len(uints))]
				if f.OverflowUint(u) {
					u = uint64(rng.Intn(256))
				}
				f.SetUint(u)
			case reflect.Int64:
				f.SetInt(ints[rng.Intn(len(ints))])
			case reflect.Slice:
				switch f.Interface().(type) {
				case []byte:
					f.SetBytes(bytes.Repeat([]byte{byte(i)}, []int{1, 255, 256, 65536}[rng.Intn(4)]))
				case []Holder:
					f.Set(reflect.ValueOf([]Holder{{Handle: uint64(i), Session: 7}, {Handle: 1 << 40, Session: 1, WaitSeq: 3, Since: 1 << 60, Gen: 1 << 33}}))
				case []Waiter:
					f.Set(reflect.ValueOf([]Waiter{{Handle: 9, Session: 8, Seq: 200, Mode: 2, Since: -1}, {Handle: 10, Seq: 3, Mode: 1, Group: []uint64{10, 1 << 40}}}))
				case []int64:
					f.Set(reflect.ValueOf(ints[:1+rng.Intn(len(ints))]))
				default:
					t.Fatalf("field %s: no values for %s", v.Type().Field(j).Name, f.Type())
				}
			case reflect.Pointer:
				switch f.Interface().(type) {
				case *LockDelayCause:
					f.Set(reflect.ValueOf(&LockDelayCause{Session: uint64(i), Handle: 3, Principal: strs[rng.Intn(len(strs))],
						Host: "h", PID: ints[rng.Intn(len(ints))], Program: strs[rng.Intn(3)], Time: 1 << 40}))
				default:
					t.Fatalf("field %s: no values for %s", v.Type().Field(j).Name, f.Type())
				}
			default:
				t.Fatalf("field %s: no values for %s", v.Type().Field(j).Name, f.Type())
			}
		}
		nodes = append(nodes, n)
		got, err := msgpack.Marshal(n)
		if err != nil {
			t.Fatal(err)
		}
		want, err := msgpack.Marshal((*plainNode)(n))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("node %d %+v: encoded by hand\n%x\nby reflection\n%x", i, n, got, want)
		}
	}
	plain := make([]*plainNode, len(nodes))
	for i, n := range nodes {
		plain[i] = (*plainNode)(n)
	}
	got, _ := msgpack.Marshal(nodes)
	want, _ := msgpack.Marshal(plain)
	if !bytes.Equal(got, want) {
		t.Fatal("the nodes' array encodes differently by hand")
	}
	var back []*Node
	if err := msgpack.Unmarshal(got, &back); err != nil || !reflect.DeepEqual(back, nodes) {
		t.Fatalf("the nodes do not decode to themselves: %v", err)
	}
}

// A snapshot allocates its encoded size about once (its chunks) and a
// state hash next to nothing: neither renders the state into a buffer
// grown by doubling, nor leaves the encoder's per-node garbage. (Before,
// each allocated over three times the encoded size.) The bounds leave
// room for the sorted keys and a quarter of the state besides.
func TestSnapshotAndHashAllocateTheStateAtMostOnce(t *testing.T) {
	h := newFSMT(t)
	s := h.session()
	h.do(s, Command{Payload: &OpenArgs{Path: fsmtPath("d"), Flags: fsmtRWC | FlagDirectory}})
	pad := strings.Repeat("n", 232)
	for i := range 10_000 {
		r := h.open(s, fmt.Sprintf("d/%07d-%s", i, pad), fsmtRWC)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		h.closeH(s, r.Handle)
	}
	size := int64(len(h.snapshot()))
	allocated := func(op func()) int64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		op()
		runtime.ReadMemStats(&after)
		return int64(after.TotalAlloc - before.TotalAlloc)
	}
	hash := allocated(func() {
		if _, _, err := h.f.StateHash(); err != nil {
			t.Fatal(err)
		}
	})
	snap := allocated(func() {
		sn, err := h.f.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		sn.Release()
	})
	t.Logf("state %d KiB: StateHash allocated %d KiB, Snapshot %d KiB", size>>10, hash>>10, snap>>10)
	if hash > size/4 {
		t.Errorf("StateHash allocated %d KiB for a state of %d KiB", hash>>10, size>>10)
	}
	if snap > size+snapshotChunkSize+size/4 {
		t.Errorf("Snapshot allocated %d KiB for a state of %d KiB", snap>>10, size>>10)
	}
}
