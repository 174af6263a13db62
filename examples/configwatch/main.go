// Command configwatch keeps many readers of one config file up to date:
// each reader is a component of its own with its own session (a Client
// with Config.ShareConnections, so the readers' sessions share one
// connection per replica), reads the config through the client's cache
// and re-reads it when its handle hears the file changed. There is no
// polling and no version check: the cell invalidates every cached copy
// before a write returns, so a read that starts after a write has
// returned sees it, from the cache or not.
//
// The config is JSON with a "version" field. Each reader prints
// "reader I version V" whenever the version it sees changes, and
// GET /versions (on -listen) has every reader read the config now and
// answers what each saw, with the cache's hit count:
//
//	{"versions":[7,7,...],"cacheHits":412}
//
// It reaches the cell from the environment, as the lockcell CLI does
// (LOCKCELL_CELL, LOCKCELL_REPLICAS, ...), and prints "ready ADDR" once
// every reader has read the config and the HTTP port serves.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"lockcell/client"
	"lockcell/client/admin"
)

// Config is the watched file's contents (only what this program reads).
type Config struct {
	Version int `json:"version"`
}

type reader struct {
	id int
	c  *client.Client
	h  *client.Handle
}

func main() {
	name := flag.String("config", "examples/configwatch/app.json", "the config file (relative to /ls/<cell>)")
	n := flag.Int("readers", 100, "how many readers")
	listen := flag.String("listen", "127.0.0.1:8081", "address of the /versions page")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg, err := client.ConfigFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	cfg.RenewSession = true // cut off for longer than the lease: a new session, the handles re-opened
	cfg.ShareConnections = true
	readers := make([]*reader, *n)
	var wg sync.WaitGroup
	for i := range readers {
		r := &reader{id: i}
		readers[i] = r
		if r.c, err = client.Dial(ctx, cfg); err != nil {
			log.Fatal(err)
		}
		if r.h, err = r.c.Open(ctx, *name, client.Read, client.WithEvents(client.OnContentsModified)); err != nil {
			log.Fatal(err)
		}
		if _, err := r.read(ctx); err != nil {
			log.Fatal(err)
		}
	}
	for _, r := range readers {
		wg.Go(func() {
			defer r.c.Close() // all at once on the way out, each bounded by Config.CloseTimeout
			r.watch(ctx)
		})
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	http.HandleFunc("GET /versions", func(w http.ResponseWriter, req *http.Request) {
		out := struct {
			Versions  []int  `json:"versions"`
			CacheHits uint64 `json:"cacheHits"`
		}{}
		for _, r := range readers {
			conf, err := r.read(req.Context())
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			out.Versions = append(out.Versions, conf.Version)
			out.CacheHits += admin.New(r.c).CacheStats().Hits
		}
		json.NewEncoder(w).Encode(out)
	})
	go http.Serve(ln, nil)
	fmt.Println("ready", ln.Addr())
	wg.Wait()
}

func (r *reader) read(ctx context.Context) (Config, error) {
	var conf Config
	data, _, err := r.h.GetContentsAndStat(ctx) // from the cache once cached
	if err == nil {
		err = json.Unmarshal(data, &conf)
	}
	return conf, err
}

// watch re-reads the config at every event of its handle: a change, or an
// Overflow (events were lost: read again anyway).
func (r *reader) watch(ctx context.Context) {
	seen := -1
	for {
		conf, err := r.read(ctx)
		if err != nil {
			if ctx.Err() == nil {
				log.Fatalf("reader %d: %v", r.id, err) // e.g. the session expired
			}
			return
		}
		if conf.Version != seen {
			seen = conf.Version
			fmt.Printf("reader %d version %d\n", r.id, seen)
		}
		select {
		case <-ctx.Done():
			return
		case <-r.h.Events():
		}
	}
}
