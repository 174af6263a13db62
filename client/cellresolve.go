package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"lockcell/wire"
)

// Finding a cell by name, as Chubby's clients do: a cells file lists each
// cell's replicas, and DNS SRV records under a domain name the rest. A
// Client of one cell needs neither (Config.Replicas names its seeds); a
// program that reaches several (Cells), or names a cell it was not
// configured with, does.

// The environment variables naming where cells are found (ConfigFromEnv
// reads them into Config.CellsFile and Config.CellsDomain).
const (
	// EnvCells is the path of a cells file (ParseCellsFile's format).
	EnvCells = "LOCKCELL_CELLS"
	// EnvCellsDomain is the DNS domain whose SRV records name cells'
	// replicas: _lockcell._tcp.<cell>.<domain>.
	EnvCellsDomain = "LOCKCELL_CELLS_DOMAIN"
)

// SRVService and SRVProto are the service and protocol of a cell's SRV
// records: a cell <cell> under domain <domain> is found at
// _lockcell._tcp.<cell>.<domain>.
const (
	SRVService = "lockcell"
	SRVProto   = "tcp"
)

// ErrUnknownCell is matched (errors.Is) by the error of a look-up that
// found no replicas for a cell name: an *UnknownCellError.
var ErrUnknownCell = errors.New("lockcell: unknown cell")

// UnknownCellError says no configured source knows the cell: Sources
// names the ones asked (a cells file's path, an SRV name), and Err is the
// last source's own error when it had one (a DNS failure), nil when each
// simply did not list the cell.
type UnknownCellError struct {
	Cell    string
	Sources []string
	Err     error
}

func (e *UnknownCellError) Error() string {
	msg := fmt.Sprintf("lockcell: unknown cell %q", e.Cell)
	if len(e.Sources) > 0 {
		msg += " (looked in " + strings.Join(e.Sources, ", ") + ")"
	} else {
		msg += " (no cells file or SRV domain configured)"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is makes errors.Is(err, ErrUnknownCell) hold.
func (e *UnknownCellError) Is(target error) bool { return target == ErrUnknownCell }

// Unwrap returns the source's own error, if any.
func (e *UnknownCellError) Unwrap() error { return e.Err }

// CellResolver finds the client addresses of a cell's replicas by the
// cell's name. A resolver that does not know the cell returns an error
// matching ErrUnknownCell; any other error is a failure to look (a
// resolver chain does not ask further on it).
type CellResolver interface {
	LookupCell(ctx context.Context, cell string) ([]string, error)
}

// CellsFile is a parsed cells file: each cell's replica addresses. Its
// LookupCell answers from it.
type CellsFile struct {
	// Path is where it was read from ("" when parsed from a reader), for
	// error messages.
	Path  string
	cells map[string][]string
}

// CellsFileError is a line of a cells file ParseCellsFile cannot use.
type CellsFileError struct {
	Path string
	Line int
	Msg  string
}

func (e *CellsFileError) Error() string {
	where := "cells file"
	if e.Path != "" {
		where = e.Path
	}
	return fmt.Sprintf("lockcell: %s:%d: %s", where, e.Line, e.Msg)
}

// ParseCellsFile reads a cells file: one cell a line, its name first and
// then its replicas' client addresses (host:port), separated by spaces,
// tabs or commas; '#' starts a comment; blank lines are ignored:
//
//	# name   replicas
//	global   g1.example.net:7001 g2.example.net:7001 g3.example.net:7001
//	east     10.1.0.11:7001,10.1.0.12:7001,10.1.0.13:7001
//
// A cell named twice, a bad cell name, a line with no address or an
// address without a port fails with a *CellsFileError naming the line.
func ParseCellsFile(r io.Reader) (*CellsFile, error) {
	f := &CellsFile{cells: map[string][]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' || r == ',' || r == '\r' })
		if len(fields) == 0 {
			continue
		}
		cell := fields[0]
		if err := wire.ValidCellName(cell); err != nil {
			return nil, &CellsFileError{Line: n, Msg: strings.TrimPrefix(err.Error(), "invalid_name: ")}
		}
		if _, dup := f.cells[cell]; dup {
			return nil, &CellsFileError{Line: n, Msg: fmt.Sprintf("cell %q is listed twice", cell)}
		}
		if len(fields) == 1 {
			return nil, &CellsFileError{Line: n, Msg: fmt.Sprintf("cell %q has no replica addresses", cell)}
		}
		var addrs []string
		for _, a := range fields[1:] {
			if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
				return nil, &CellsFileError{Line: n, Msg: fmt.Sprintf("cell %q: address %q is not host:port", cell, a)}
			}
			if !slices.Contains(addrs, a) {
				addrs = append(addrs, a)
			}
		}
		f.cells[cell] = addrs
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("lockcell: cells file: %w", err)
	}
	return f, nil
}

// LoadCellsFile reads and parses the cells file at path.
func LoadCellsFile(path string) (*CellsFile, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("lockcell: cells file: %w", err)
	}
	defer fh.Close()
	f, err := ParseCellsFile(fh)
	var fe *CellsFileError
	if errors.As(err, &fe) {
		fe.Path = path
	}
	if f != nil {
		f.Path = path
	}
	return f, err
}

// Cells returns the names the file lists, sorted.
func (f *CellsFile) Cells() []string {
	out := make([]string, 0, len(f.cells))
	for c := range f.cells {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// LookupCell returns the cell's addresses as the file lists them, or an
// *UnknownCellError.
func (f *CellsFile) LookupCell(_ context.Context, cell string) ([]string, error) {
	if a, ok := f.cells[cell]; ok {
		return slices.Clone(a), nil
	}
	return nil, &UnknownCellError{Cell: cell, Sources: []string{f.source()}}
}

func (f *CellsFile) source() string {
	if f.Path == "" {
		return "the cells file"
	}
	return f.Path
}

// SRVResolver finds a cell's replicas in DNS: the SRV records of
// _lockcell._tcp.<cell>.<Domain>, each naming a replica's host and client
// port, in the order net.Resolver.LookupSRV gives them (by priority,
// randomised by weight within one).
type SRVResolver struct {
	Domain string
	// Resolver does the look-ups (nil: net.DefaultResolver).
	Resolver *net.Resolver
}

// LookupCell asks DNS. A name that does not exist or holds no SRV record
// is an *UnknownCellError; a DNS failure (a timeout, a server failure) is
// too, with the DNS error as its Err, since it cannot tell whether the
// cell exists.
func (r SRVResolver) LookupCell(ctx context.Context, cell string) ([]string, error) {
	res := r.Resolver
	if res == nil {
		res = net.DefaultResolver
	}
	name := r.Name(cell)
	_, srvs, err := res.LookupSRV(ctx, SRVService, SRVProto, cell+"."+strings.Trim(r.Domain, "."))
	var de *net.DNSError
	if errors.As(err, &de) && de.IsNotFound {
		err = nil // no such name: unknown, not a failure
	}
	if err != nil || len(srvs) == 0 {
		return nil, &UnknownCellError{Cell: cell, Sources: []string{"SRV " + name}, Err: err}
	}
	var addrs []string
	for _, s := range srvs {
		a := net.JoinHostPort(strings.TrimSuffix(s.Target, "."), strconv.Itoa(int(s.Port)))
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	return addrs, nil
}

// Name is the DNS name LookupCell asks for cell.
func (r SRVResolver) Name(cell string) string {
	return "_" + SRVService + "._" + SRVProto + "." + cell + "." + strings.Trim(r.Domain, ".")
}

// Resolvers asks each resolver in turn: the first that knows the cell
// answers. When none does, the error is an *UnknownCellError naming every
// source asked; a resolver's failure other than not knowing the cell ends
// the look-up with that failure.
type Resolvers []CellResolver

// LookupCell implements CellResolver.
func (rs Resolvers) LookupCell(ctx context.Context, cell string) ([]string, error) {
	unknown := &UnknownCellError{Cell: cell}
	for _, r := range rs {
		addrs, err := r.LookupCell(ctx, cell)
		if err == nil {
			return addrs, nil
		}
		var ue *UnknownCellError
		if !errors.As(err, &ue) {
			return nil, err
		}
		unknown.Sources = append(unknown.Sources, ue.Sources...)
		if ue.Err != nil {
			unknown.Err = ue.Err
		}
	}
	return nil, unknown
}

// CellResolverFor returns the resolver cfg describes: its cells file
// (Config.CellsFile, read now), then DNS under Config.CellsDomain (through
// Config.NetResolver). With neither it returns an empty Resolvers, which
// knows no cell.
func CellResolverFor(cfg Config) (CellResolver, error) {
	var rs Resolvers
	if cfg.CellsFile != "" {
		f, err := LoadCellsFile(cfg.CellsFile)
		if err != nil {
			return nil, err
		}
		rs = append(rs, f)
	}
	if cfg.CellsDomain != "" {
		rs = append(rs, SRVResolver{Domain: cfg.CellsDomain, Resolver: cfg.NetResolver})
	}
	return rs, nil
}

// CellOf returns the cell a full name /ls/<cell>/... names, and false for
// a name that is not of that form (a relative name, say).
func CellOf(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "/ls/")
	if !ok {
		return "", false
	}
	cell, _, _ := strings.Cut(rest, "/")
	if wire.ValidCellName(cell) != nil {
		return "", false
	}
	return cell, true
}

// resolveSeeds fills in Config.Replicas from the cells file or DNS when
// none are given and either is configured: Dial of a cell known only by
// name.
func (c *Config) resolveSeeds(ctx context.Context) error {
	if len(c.Replicas) > 0 || c.CellsFile == "" && c.CellsDomain == "" {
		return nil
	}
	r, err := CellResolverFor(*c)
	if err != nil {
		return err
	}
	addrs, err := r.LookupCell(ctx, c.Cell)
	if err != nil {
		return err
	}
	c.Replicas = addrs
	return nil
}
