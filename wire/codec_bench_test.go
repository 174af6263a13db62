package wire

import (
	"bytes"
	"testing"
)

// BenchmarkCodec is the codec's share of one small call, as each end does
// it: the request (a Header and a HandleRequest written by the client,
// read and decoded by the master) and the reply (a Status and a 100-byte
// ContentsResponse written by the master, read and decoded by the client),
// through a bytes.Buffer so that only the codec allocates. The decoded
// values are what the caller keeps (the Contents of the reply, strings):
// everything else is the codec's own, and allocs/op counts it.
func BenchmarkCodec(b *testing.B) {
	b.Run("request", func(b *testing.B) {
		var buf bytes.Buffer
		h := &Header{Method: MethodGetContentsAndStat, Session: 1 << 40, Epoch: 7, Seq: 12345, Ack: 12344, KeepStream: true}
		req := &HandleRequest{Handle: 1 << 41, Cache: true}
		var gotH Header
		var gotReq HandleRequest
		b.ReportAllocs()
		for range b.N {
			buf.Reset()
			if err := WriteMessage(&buf, h, req); err != nil {
				b.Fatal(err)
			}
			if err := ReadMessage(&buf, &gotH); err != nil {
				b.Fatal(err)
			}
			body, err := ReadFrame(&buf)
			if err != nil {
				b.Fatal(err)
			}
			gotReq = HandleRequest{}
			if err := Decode(body, &gotReq); err != nil {
				b.Fatal(err)
			}
		}
		if gotH != *h || gotReq.Handle != req.Handle || !gotReq.Cache {
			b.Fatalf("decoded %+v %+v", gotH, gotReq)
		}
	})
	b.Run("reply", func(b *testing.B) {
		var buf bytes.Buffer
		st := &Status{Code: CodeOK, Epoch: 7}
		resp := &ContentsResponse{Contents: make([]byte, 100), Stat: Stat{Instance: 9, ContentGen: 3, Size: 100,
			CTime: 1 << 60, MTime: 1 << 60, ReadACL: "/ls/c/acl/r"}, Cacheable: true}
		var gotSt Status
		var got ContentsResponse
		b.ReportAllocs()
		for range b.N {
			buf.Reset()
			if err := WriteMessage(&buf, st, resp); err != nil {
				b.Fatal(err)
			}
			if err := ReadMessage(&buf, &gotSt); err != nil {
				b.Fatal(err)
			}
			body, err := ReadFrame(&buf)
			if err != nil {
				b.Fatal(err)
			}
			got = ContentsResponse{}
			if err := Decode(body, &got); err != nil {
				b.Fatal(err)
			}
		}
		if gotSt != *st || len(got.Contents) != 100 || got.Stat.ReadACL != resp.Stat.ReadACL {
			b.Fatalf("decoded %+v %+v", gotSt, got)
		}
	})
}
