package certs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// DevCAValidity is how long a development set's CA lasts.
const DevCAValidity = 10 * 365 * 24 * time.Hour

// CAFile is the CA certificate's path in a development set's folder.
func CAFile(dir string) string { return filepath.Join(dir, "ca.crt") }

// CAKeyFile is the CA key's path in a development set's folder.
func CAKeyFile(dir string) string { return filepath.Join(dir, "ca.key") }

// ReplicaFiles are replica id's certificate and key paths in a development
// set's folder: replica-<id>.crt and replica-<id>.key.
func ReplicaFiles(dir, id string) (certFile, keyFile string) {
	return filepath.Join(dir, "replica-"+id+".crt"), filepath.Join(dir, "replica-"+id+".key")
}

// UserFiles are user's certificate and key paths in a development set's
// folder: <user>.crt and <user>.key.
func UserFiles(dir, user string) (certFile, keyFile string) {
	return filepath.Join(dir, user+".crt"), filepath.Join(dir, user+".key")
}

// DevSet describes a development set of certificates in one folder: a CA,
// one certificate per replica and one per user ("admin" always).
type DevSet struct {
	// Dir is the folder (created with mode 0700 if missing).
	Dir string
	// Replicas are the replica ids.
	Replicas []string
	// Users are the principals to issue user certificates for.
	Users []string
	// Hosts are extra names and addresses for the replica certificates.
	Hosts []string
}

// WriteDevSet writes a development set to dir: ca.crt and ca.key,
// replica-<id>.crt/.key for each id, and <user>.crt/.key for "admin" and
// each of users. See DevSet.Write.
func WriteDevSet(dir string, replicaIDs []string, users ...string) error {
	return DevSet{Dir: dir, Replicas: replicaIDs, Users: users}.Write()
}

// Write creates what is missing of the set and keeps what exists: an
// existing CA (ca.crt and ca.key) issues the new certificates, and
// existing certificate files are left alone, so running it again with
// more users adds them. Keys are written with mode 0600.
func (d DevSet) Write() error {
	if d.Dir == "" {
		return errors.New("certs: no folder for the development set")
	}
	users := append([]string{AdminUser}, d.Users...)
	for _, u := range users {
		if err := validPrincipal(u); err != nil {
			return err
		}
		if strings.ContainsAny(u, `/\`) || strings.HasPrefix(u, ".") || strings.HasPrefix(u, "replica-") || u == "ca" {
			return fmt.Errorf("certs: user %q cannot be a file name in the set", u)
		}
	}
	if err := os.MkdirAll(d.Dir, 0o700); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	ca, err := d.ca()
	if err != nil {
		return err
	}
	for _, id := range d.Replicas {
		cf, kf := ReplicaFiles(d.Dir, id)
		if exists(cf) && exists(kf) {
			continue
		}
		c, err := ca.IssueReplica(id, WithHosts(d.Hosts...))
		if err != nil {
			return err
		}
		if err := c.Write(cf, kf); err != nil {
			return err
		}
	}
	slices.Sort(users)
	for _, u := range slices.Compact(users) {
		cf, kf := UserFiles(d.Dir, u)
		if exists(cf) && exists(kf) {
			continue
		}
		c, err := ca.IssueUser(u)
		if err != nil {
			return err
		}
		if err := c.Write(cf, kf); err != nil {
			return err
		}
	}
	return nil
}

// ca loads the set's CA, or creates one when the folder has none.
func (d DevSet) ca() (*CA, error) {
	cf, kf := CAFile(d.Dir), CAKeyFile(d.Dir)
	switch {
	case exists(cf) && exists(kf):
		return LoadCA(cf, kf)
	case exists(cf) || exists(kf):
		return nil, fmt.Errorf("certs: %s has half a CA (ca.crt or ca.key missing)", d.Dir)
	}
	ca, err := NewCA("lockcell dev CA", DevCAValidity)
	if err != nil {
		return nil, err
	}
	if err := ca.Write(cf, kf); err != nil {
		return nil, err
	}
	return ca, nil
}

func exists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}
