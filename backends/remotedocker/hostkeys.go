package remotedocker

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/sandboxkit/sandboxkit/backend"
)

// HostKeyError is a server's SSH host key that known_hosts does not vouch
// for: an unknown host (Known is empty) or a key that changed. Its message
// has the offered key's fingerprint and the exact fix. It wraps
// backend.ErrInvalidConfig: retrying does not help until known_hosts is
// fixed.
type HostKeyError struct {
	// Host is the known_hosts name ("host" or "[host]:port").
	Host string
	// Offered is the server's key; Fingerprint its SHA256 fingerprint.
	Offered     ssh.PublicKey
	Fingerprint string
	// Known are the keys known_hosts has for Host ("file:line type SHA256:...").
	Known []string
	// Files are the known_hosts files that were checked.
	Files []string
	// Line is the known_hosts line that trusts Offered.
	Line string
}

func (e *HostKeyError) Unwrap() error { return backend.ErrInvalidConfig }

func (e *HostKeyError) Error() string {
	var b strings.Builder
	host, port := e.Host, "22"
	if h, p, err := net.SplitHostPort(e.Host); err == nil {
		host, port = strings.Trim(h, "[]"), p
	}
	file := "~/.ssh/known_hosts"
	if len(e.Files) > 0 {
		file = e.Files[0]
	}
	keyscan := fmt.Sprintf("ssh-keyscan -p %s -t %s %s >> %s", port, keyscanType(e.Offered.Type()), host, file)
	if len(e.Known) == 0 {
		fmt.Fprintf(&b, "%v: the SSH host key of %s is not known: it offered %s %s, and no known_hosts file (%s) has a key for it. ",
			backend.ErrInvalidConfig, e.Host, e.Offered.Type(), e.Fingerprint, strings.Join(e.Files, ", "))
		fmt.Fprintf(&b, "If %s is that server's key (compare `ssh-keygen -lf /etc/ssh/ssh_host_%s_key.pub` on the server), trust it by adding this line to %s:\n\t%s\n",
			e.Fingerprint, keyscanType(e.Offered.Type()), file, e.Line)
		fmt.Fprintf(&b, "or run `%s` and check the fingerprint. For a throwaway host only, insecure_ignore_host_key = true skips the check.", keyscan)
		return b.String()
	}
	fmt.Fprintf(&b, "%v: REFUSING %s: its SSH host key has CHANGED, or someone is intercepting the connection. It offered %s %s; known_hosts has %s. ",
		backend.ErrInvalidConfig, e.Host, e.Offered.Type(), e.Fingerprint, strings.Join(e.Known, "; "))
	fmt.Fprintf(&b, "If the server was reinstalled and %s is its new key, remove the old entry with `ssh-keygen -R %s -f %s` and add this line:\n\t%s",
		e.Fingerprint, knownhosts.Normalize(e.Host), knownFile(e.Known, file), e.Line)
	return b.String()
}

// knownFile is the file of the first known key, else def.
func knownFile(known []string, def string) string {
	if len(known) > 0 {
		if f, _, ok := strings.Cut(known[0], ":"); ok {
			return f
		}
	}
	return def
}

// keyscanType is ssh-keyscan's -t name of a key type.
func keyscanType(t string) string {
	switch {
	case t == ssh.KeyAlgoED25519:
		return "ed25519"
	case strings.HasPrefix(t, "ecdsa-"):
		return "ecdsa"
	case t == ssh.KeyAlgoRSA:
		return "rsa"
	}
	return t
}

// hostKeys checks server keys against known_hosts files.
type hostKeys struct {
	files    []string // that exist
	missing  []string // named but absent, for messages
	cb       ssh.HostKeyCallback
	insecure bool
	warn     func(msg string, args ...any)
}

// newHostKeys opens the known_hosts files for target: configured (the
// known_hosts key), the user's (UserKnownHostsFile, else
// ~/.ssh/known_hosts) and the global ones.
func newHostKeys(extra string, t *sshTarget, insecure bool, warn func(string, ...any)) (*hostKeys, error) {
	hk := &hostKeys{insecure: insecure, warn: warn}
	var names []string
	if extra != "" {
		names = append(names, extra)
	}
	if t.knownHosts != nil {
		names = append(names, t.knownHosts...)
	} else if home, err := os.UserHomeDir(); err == nil {
		names = append(names, filepath.Join(home, ".ssh", "known_hosts"))
	}
	names = append(names, t.globalKnown...)
	for _, n := range names {
		if slices.Contains(hk.files, n) || n == "/dev/null" {
			continue
		}
		if _, err := os.Stat(n); err != nil {
			hk.missing = append(hk.missing, n)
			continue
		}
		hk.files = append(hk.files, n)
	}
	if len(hk.files) > 0 {
		cb, err := knownhosts.New(hk.files...)
		if err != nil {
			return nil, invalid("known_hosts: %v", err)
		}
		hk.cb = cb
	}
	return hk, nil
}

// knownAddr is the host:port known_hosts is searched for (HostKeyAlias
// replaces both, as in ssh(1)).
func knownAddr(t *sshTarget) string {
	if t.hostKeyAlias != "" {
		return hostPort(t.hostKeyAlias, 22)
	}
	return t.addr()
}

// probeKey is a key no server has, used to ask known_hosts which keys it
// has for a host (the KeyError lists them).
var probeKey = func() ssh.PublicKey {
	k, err := ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))
	if err != nil {
		panic(err)
	}
	return k
}()

// known returns the keys known_hosts has for target.
func (hk *hostKeys) known(t *sshTarget) []knownhosts.KnownKey {
	if hk.cb == nil {
		return nil
	}
	err := hk.cb(knownAddr(t), &net.TCPAddr{}, probeKey)
	if ke, ok := errors.AsType[*knownhosts.KeyError](err); ok {
		return ke.Want
	}
	return nil
}

// preferredAlgorithms is OpenSSH's order of plain host key algorithms, used
// for a host known_hosts has no key for, so the key (and fingerprint) the
// refusal shows is the one ssh(1) and ssh-keyscan show first.
var preferredAlgorithms = []string{
	ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521,
	ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256,
}

// algorithms returns the host key algorithms to offer for target: those of
// the keys known_hosts has, so the server presents one of them (else it may
// present another type and look like a changed key); OpenSSH's order when
// it has none.
func (hk *hostKeys) algorithms(t *sshTarget) []string {
	known := hk.known(t)
	if len(known) == 0 {
		return preferredAlgorithms
	}
	var algos []string
	for _, k := range known {
		switch typ := k.Key.Type(); typ {
		case ssh.KeyAlgoRSA:
			algos = append(algos, ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		default:
			algos = append(algos, typ)
		}
	}
	return algos
}

// callback verifies target's key; a refused key is a *HostKeyError.
func (hk *hostKeys) callback(t *sshTarget) ssh.HostKeyCallback {
	addr := knownAddr(t)
	name := knownhosts.Normalize(addr)
	return func(_ string, remote net.Addr, key ssh.PublicKey) error {
		fp := ssh.FingerprintSHA256(key)
		if hk.insecure {
			hk.warn("insecure_ignore_host_key is set: NOT verifying the SSH host key", "host", name, "key", key.Type()+" "+fp)
			return nil
		}
		var err error = &knownhosts.KeyError{}
		if hk.cb != nil {
			err = hk.cb(addr, remote, key)
		}
		if err == nil {
			return nil
		}
		if re, ok := errors.AsType[*knownhosts.RevokedError](err); ok {
			return fmt.Errorf("%w: REFUSING %s: its SSH host key %s %s is marked @revoked in %s:%d",
				backend.ErrInvalidConfig, name, key.Type(), fp, re.Revoked.Filename, re.Revoked.Line)
		}
		ke, ok := errors.AsType[*knownhosts.KeyError](err)
		if !ok {
			return fmt.Errorf("%w: checking the SSH host key of %s: %v", backend.ErrInvalidConfig, name, err)
		}
		files := hk.files
		if len(files) == 0 {
			files = hk.missing
		}
		e := &HostKeyError{Host: name, Offered: key, Fingerprint: fp, Files: files,
			Line: knownhosts.Line([]string{name}, key)}
		for _, k := range ke.Want {
			e.Known = append(e.Known, k.Filename+":"+strconv.Itoa(k.Line)+" "+k.Key.Type()+" "+ssh.FingerprintSHA256(k.Key))
		}
		return e
	}
}
