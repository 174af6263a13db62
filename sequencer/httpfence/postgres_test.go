package httpfence_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"lockcell/fixtures"
	"lockcell/sequencer"
	"lockcell/sequencer/httpfence"
)

// postgres starts a private PostgreSQL server for the test (initdb and
// pg_ctl in a temporary folder, listening on a Unix socket only, as the
// "postgres" or "nobody" user when the test runs as root, since the server
// refuses to run as root) and returns a database handle on it. It skips the
// test, saying why, when the server binaries are missing or the server
// cannot start (`make postgres-deps` installs them).
func postgres(t *testing.T) *sql.DB {
	t.Helper()
	bin := pgBin()
	if bin == "" {
		t.Skip("PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or under /usr/lib/postgresql: `make postgres-deps` installs them")
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		for _, name := range []string{"postgres", "nobody"} {
			if u, err := user.Lookup(name); err == nil {
				uid, _ := strconv.Atoi(u.Uid)
				gid, _ := strconv.Atoi(u.Gid)
				cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
				break
			}
		}
		if cred == nil {
			t.Skip("running as root and no postgres or nobody user to run PostgreSQL as")
		}
	}
	// Not t.TempDir: its parent is private to root, and the socket path
	// must stay short (Unix socket paths are limited to 107 bytes).
	dir, err := os.MkdirTemp("", "lockcell-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	run := func(name string, args ...string) error {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "LC_ALL=C"}
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w\n%s", name, err, out)
		}
		return nil
	}
	if err := run("initdb", "-D", data, "-U", "lockcell", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"); err != nil {
		t.Skipf("PostgreSQL cannot be set up here: %v", err)
	}
	// No TCP listener; durability off: the test is about the statement's
	// semantics, not about crashes.
	opts := "-c listen_addresses= -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=20 -k " + dir
	if err := run("pg_ctl", "start", "-D", data, "-w", "-t", "30", "-l", filepath.Join(dir, "log"), "-o", opts); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		t.Skipf("PostgreSQL cannot start here: %v\n%s", err, log)
	}
	t.Cleanup(func() {
		if err := run("pg_ctl", "stop", "-D", data, "-m", "fast", "-w", "-t", "30"); err != nil {
			t.Logf("stopping PostgreSQL: %v", err)
		}
	})
	db, err := sql.Open("pgx", "host="+dir+" user=lockcell dbname=postgres sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// pgBin returns the folder of initdb and pg_ctl: the PATH's, or the newest
// Debian install's.
func pgBin() string {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("pg_ctl"); err == nil {
			if real, err := filepath.EvalSymlinks(p); err == nil {
				return filepath.Dir(real)
			}
			return filepath.Dir(p)
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { // by major version, numerically
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d
		}
	}
	return ""
}

// fencedUpdate is the conditional write of docs/fencing.md: one statement
// that writes the row only if no newer lock generation has written it, and
// records its own generation with the row.
const fencedUpdate = `UPDATE accounts SET balance = $1, fence_gen = $2 WHERE id = $3 AND fence_gen <= $2`

// fencedUpsert creates the row or updates it under the same condition.
const fencedUpsert = `INSERT INTO accounts (id, balance, fence_gen) VALUES ($3, $1, $2)
ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance, fence_gen = EXCLUDED.fence_gen
WHERE accounts.fence_gen <= EXCLUDED.fence_gen`

// write runs a fenced statement and reports whether it wrote the row.
func write(ctx context.Context, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, stmt string, balance int64, gen uint64, id string) (bool, error) {
	res, err := db.ExecContext(ctx, stmt, balance, int64(gen), id)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// The conditional write against a real PostgreSQL, with generations of a
// real lock: the new holder's write lands and the old holder's later one
// changes nothing; an old holder's write that was blocked behind the new
// holder's uncommitted one is re-checked against the committed row and
// also changes nothing; and behind two resource server replicas, each with
// its own guard, the database refuses the old holder at the replica whose
// guard never saw the new generation.
func TestPostgresConditionalWrite(t *testing.T) {
	db := postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL, fence_gen bigint NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	name := c.Name("accounts")
	hA, seqA := holder(t, ctx, c, name)
	sA, _ := sequencer.Parse(seqA)

	for _, id := range []string{"alice", "bob"} {
		if ok, err := write(ctx, db, fencedUpsert, 100, sA.Generation, id); err != nil || !ok {
			t.Fatalf("A creates row %s: %v %v", id, ok, err)
		}
	}
	if ok, err := write(ctx, db, fencedUpdate, 110, sA.Generation, "alice"); err != nil || !ok {
		t.Fatalf("A writes again at its generation: %v %v", ok, err)
	}
	if err := hA.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, seqB := holder(t, ctx, c, name)
	sB, _ := sequencer.Parse(seqB)
	if sB.Generation <= sA.Generation {
		t.Fatalf("generations: A %d, B %d", sA.Generation, sB.Generation)
	}
	if ok, err := write(ctx, db, fencedUpdate, 200, sB.Generation, "alice"); err != nil || !ok {
		t.Fatalf("B writes: %v %v", ok, err)
	}
	for _, stmt := range []string{fencedUpdate, fencedUpsert} {
		if ok, err := write(ctx, db, stmt, 999, sA.Generation, "alice"); err != nil || ok {
			t.Fatalf("A's late write (%.6s): wrote %v, %v; want refused", stmt, ok, err)
		}
	}
	mustRow(t, ctx, db, "alice", 200, sB.Generation)

	// A's write to bob (still at A's generation) arrives while B's first
	// write to it is in flight: it matches the committed row, waits for
	// B's row lock, and then PostgreSQL re-evaluates the WHERE clause on
	// the row B committed.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if ok, err := write(ctx, tx, fencedUpdate, 300, sB.Generation, "bob"); err != nil || !ok {
		t.Fatalf("B's write in a transaction: %v %v", ok, err)
	}
	type result struct {
		ok  bool
		err error
	}
	late := make(chan result, 1)
	go func() {
		ok, err := write(ctx, db, fencedUpdate, 999, sA.Generation, "bob")
		late <- result{ok, err}
	}()
	waitBlocked(t, ctx, db)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if r := <-late; r.err != nil || r.ok {
		t.Fatalf("A's write blocked behind B's: wrote %v, %v; want refused", r.ok, r.err)
	}
	mustRow(t, ctx, db, "bob", 300, sB.Generation)

	// Two replicas of a resource server, each with its own guard (no
	// Checker), share the table. Replica 2 has seen only A's generation,
	// so its guard admits A's late request; the statement refuses it.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := httpfence.FromContext(r.Context())
		ok, err := write(r.Context(), db, fencedUpdate, 500, s.Generation, "alice")
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		case !ok:
			http.Error(w, "a newer lock holder has written this row", http.StatusConflict)
		}
	})
	replica1 := httptest.NewServer(httpfence.Wrap(handler, httpfence.Config{Guard: sequencer.NewGuard(sequencer.GuardConfig{})}))
	defer replica1.Close()
	guard2 := sequencer.NewGuard(sequencer.GuardConfig{})
	if _, err := guard2.Check(ctx, seqA); err != nil {
		t.Fatal(err)
	}
	replica2 := httptest.NewServer(httpfence.Wrap(handler, httpfence.Config{Guard: guard2}))
	defer replica2.Close()
	if a := send(t, replica1.URL, sequencer.EncodeText(seqA), ""); a.status != http.StatusConflict {
		t.Fatalf("A at replica 1: %d %s, want 409 from the database", a.status, a.body)
	}
	if a := send(t, replica2.URL, sequencer.EncodeText(seqA), ""); a.status != http.StatusConflict || strings.Contains(a.body, "reason") {
		t.Fatalf("A at replica 2: %d %s, want 409 from the database, past the guard", a.status, a.body)
	}
	mustRow(t, ctx, db, "alice", 200, sB.Generation)
	if a := send(t, replica2.URL, sequencer.EncodeText(seqB), ""); a.status != 200 {
		t.Fatalf("B at replica 2: %d %s", a.status, a.body)
	}
	mustRow(t, ctx, db, "alice", 500, sB.Generation)
}

func mustRow(t *testing.T, ctx context.Context, db *sql.DB, id string, balance int64, gen uint64) {
	t.Helper()
	var b, g int64
	if err := db.QueryRowContext(ctx, `SELECT balance, fence_gen FROM accounts WHERE id = $1`, id).Scan(&b, &g); err != nil {
		t.Fatal(err)
	}
	if b != balance || uint64(g) != gen {
		t.Fatalf("row %s: balance %d generation %d, want %d at %d", id, b, g, balance, gen)
	}
}

// waitBlocked waits until some statement waits for a lock.
func waitBlocked(t *testing.T, ctx context.Context, db *sql.DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'`).Scan(&n)
		if err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the late write never waited for the row lock")
		case <-tick.C:
		}
	}
}
