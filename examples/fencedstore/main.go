// Command fencedstore is a small HTTP resource server that only accepts
// writes made under a lockcell lock: each write carries the writer's
// sequencer (the Lockcell-Sequencer header), and a sequencer.Guard refuses
// one that is malformed, not signed by the cell, of a lock no longer held
// at that generation, or older than the newest it has accepted for the
// same lock. So a deposed leader that wakes up from a pause and writes is
// refused, whatever it believes (examples/leader).
//
//	POST /write?writer=ID&n=N   body: the value; 200, or 409 when fenced out
//	GET  /log                   the accepted writes in order, and the refusals (JSON)
//
// It reaches the cell from the environment, as the lockcell CLI does
// (LOCKCELL_CELL, LOCKCELL_REPLICAS, ...), to let the cell vouch for each
// sequencer, and prints "listening ADDR" once it serves.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"lockcell/client"
	"lockcell/sequencer"
	"lockcell/sequencer/httpfence"
)

// Write is one write as the store saw it.
type Write struct {
	Writer     string    `json:"writer"`
	N          int       `json:"n"`
	Lock       string    `json:"lock"`
	Generation uint64    `json:"generation"`
	Value      string    `json:"value,omitempty"`
	Reason     string    `json:"reason,omitempty"` // why it was refused
	At         time.Time `json:"at"`
}

type store struct {
	mu       sync.Mutex
	accepted []Write
	refused  []Write
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg, err := client.ConfigFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	s := &store{}
	guard := sequencer.NewGuard(sequencer.GuardConfig{Checker: c, Cell: c.Cell()})
	mux := http.NewServeMux()
	mux.Handle("POST /write", httpfence.Wrap(http.HandlerFunc(s.write),
		httpfence.Config{Guard: guard, BufferBody: 64 << 10, OnReject: s.reject}))
	mux.HandleFunc("GET /log", s.log)

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("listening", ln.Addr())
	srv := &http.Server{Handler: mux}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		log.Fatal(err)
	}
}

// write runs inside the guard's fence for the writer's lock: no older
// holder's write can be accepted while it runs, so the log is in
// generation order.
func (s *store) write(w http.ResponseWriter, r *http.Request) {
	seq, _ := httpfence.FromContext(r.Context())
	value, _ := io.ReadAll(r.Body)
	wr := record(r, seq)
	wr.Value = string(value)
	s.mu.Lock()
	s.accepted = append(s.accepted, wr)
	s.mu.Unlock()
	fmt.Fprintf(w, "stored under %s generation %d\n", seq.Path, seq.Generation)
}

func (s *store) reject(w http.ResponseWriter, r *http.Request, rej *httpfence.Rejection) {
	wr := record(r, rej.Sequencer)
	wr.Reason = rej.Reason
	s.mu.Lock()
	s.refused = append(s.refused, wr)
	s.mu.Unlock()
	http.Error(w, rej.Reason+": "+rej.Error(), rej.Status)
}

func record(r *http.Request, seq sequencer.Sequencer) Write {
	n, _ := strconv.Atoi(r.URL.Query().Get("n"))
	return Write{Writer: r.URL.Query().Get("writer"), N: n, Lock: seq.Path, Generation: seq.Generation, At: time.Now()}
}

func (s *store) log(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string][]Write{"accepted": s.accepted, "refused": s.refused})
}
