package remotedocker

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// auth is the public-key authentication for one connection attempt: the
// ssh-agent's keys, then identity files, as ssh(1) tries them.
type auth struct {
	signers []ssh.Signer
	tried   []string // what was offered, for the failure message
	skipped []string // keys that could not be used, and why
	closer  func()   // closes the agent connection
}

// newAuth collects signers for target. explicit is the identity_file key
// (which must exist); the target's identity files come from ~/.ssh/config
// or ssh's defaults.
func newAuth(explicit string, t *sshTarget) (*auth, error) {
	a := &auth{closer: func() {}}
	files := t.identityFiles
	if explicit != "" {
		files = append([]string{explicit}, files...)
	}
	var fileSigners []ssh.Signer
	var filePubs [][]byte
	for i, f := range files {
		s, pub, err := loadIdentity(f)
		switch {
		case err == nil:
			fileSigners = append(fileSigners, s)
			filePubs = append(filePubs, pub)
			a.tried = append(a.tried, f)
		case errors.Is(err, fs.ErrNotExist) && (i > 0 || explicit == ""):
			// Missing configured or default files are skipped, as ssh does.
			if !t.defaultIDs {
				a.skipped = append(a.skipped, f+": does not exist")
			}
		case errors.Is(err, fs.ErrNotExist):
			return nil, invalid("identity_file %s does not exist", f)
		default:
			a.skipped = append(a.skipped, f+": "+err.Error())
		}
	}
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			a.skipped = append(a.skipped, "ssh-agent at SSH_AUTH_SOCK="+sock+": "+err.Error())
		} else {
			a.closer = func() { conn.Close() }
			ag := agent.NewClient(conn)
			signers, err := ag.Signers()
			if err != nil {
				a.skipped = append(a.skipped, "ssh-agent: "+err.Error())
			}
			n := 0
			for _, s := range signers {
				// IdentitiesOnly: only the agent's copies of the files' keys.
				if t.identitiesOnly && !containsKey(filePubs, s.PublicKey().Marshal()) {
					continue
				}
				a.signers = append(a.signers, s)
				n++
			}
			a.tried = append([]string{fmt.Sprintf("ssh-agent (%d keys)", n)}, a.tried...)
		}
	}
	a.signers = append(a.signers, fileSigners...)
	return a, nil
}

func containsKey(keys [][]byte, k []byte) bool {
	for _, x := range keys {
		if bytes.Equal(x, k) {
			return true
		}
	}
	return false
}

// loadIdentity reads an unencrypted private key. An encrypted one is
// reported with the fix (ssh-agent), since there is no terminal to ask
// for its passphrase.
func loadIdentity(path string) (ssh.Signer, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	s, err := ssh.ParsePrivateKey(data)
	if err != nil {
		if _, ok := errors.AsType[*ssh.PassphraseMissingError](err); ok {
			return nil, nil, fmt.Errorf("encrypted with a passphrase; add it to ssh-agent (ssh-add %s)", path)
		}
		return nil, nil, err
	}
	return s, s.PublicKey().Marshal(), nil
}

func (a *auth) methods() []ssh.AuthMethod {
	return []ssh.AuthMethod{ssh.PublicKeys(a.signers...)}
}

// explain describes a failed authentication with what to do about it.
func (a *auth) explain(t *sshTarget) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sshd on %s did not accept any key for user %s", t.addr(), t.user)
	if len(a.tried) > 0 {
		fmt.Fprintf(&b, " (tried %s)", strings.Join(a.tried, ", "))
	} else {
		b.WriteString(" (there was no key to offer: no ssh-agent (SSH_AUTH_SOCK) and no identity file)")
	}
	if len(a.skipped) > 0 {
		fmt.Fprintf(&b, "; skipped %s", strings.Join(a.skipped, "; "))
	}
	fmt.Fprintf(&b, ". Add your public key to ~%s/.ssh/authorized_keys on the server (ssh-copy-id -p %d %s@%s), load it into ssh-agent, or set identity_file",
		t.user, t.port, t.user, t.host)
	return b.String()
}
