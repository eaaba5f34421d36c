package remotedocker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	sshconfig "github.com/kevinburke/ssh_config"
)

// sshSettings answers OpenSSH client config questions from the user's file
// and the system's, first match winning as in ssh(1).
type sshSettings struct {
	files []*sshconfig.Config
}

const systemSSHConfig = "/etc/ssh/ssh_config"

// loadSSHSettings reads path ("" for ~/.ssh/config, "none" for nothing)
// and /etc/ssh/ssh_config. A missing default file is no error; a file that
// does not parse is, except the system one (a distribution's file may use
// directives the parser lacks), which is then skipped.
func loadSSHSettings(path string) (*sshSettings, error) {
	s := &sshSettings{}
	if path == "none" {
		return s, nil
	}
	explicit := path != ""
	if !explicit {
		home, err := os.UserHomeDir()
		if err != nil {
			return s, nil
		}
		path = filepath.Join(home, ".ssh", "config")
	}
	if cfg, err := parseSSHConfig(path); err == nil {
		s.files = append(s.files, cfg)
	} else if explicit || !errors.Is(err, fs.ErrNotExist) {
		return nil, invalid("ssh_config %s: %v", path, err)
	}
	if cfg, err := parseSSHConfig(systemSSHConfig); err == nil {
		s.files = append(s.files, cfg)
	}
	return s, nil
}

func parseSSHConfig(path string) (*sshconfig.Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return sshconfig.Decode(f)
}

func (s *sshSettings) get(alias, key string) string {
	for _, f := range s.files {
		if v, err := f.Get(alias, key); err == nil && v != "" {
			return v
		}
	}
	return ""
}

func (s *sshSettings) getAll(alias, key string) []string {
	var all []string
	for _, f := range s.files {
		if v, err := f.GetAll(alias, key); err == nil {
			all = append(all, v...)
		}
	}
	return all
}

// sshTarget is one SSH server to connect to, with everything ~/.ssh/config
// says about it resolved.
type sshTarget struct {
	alias          string // as written in docker_host or ProxyJump
	host           string // HostName
	port           int
	user           string
	identityFiles  []string // expanded; from ssh config or the defaults
	defaultIDs     bool     // identityFiles are ssh's defaults, not configured
	identitiesOnly bool
	knownHosts     []string // UserKnownHostsFile (nil: ~/.ssh/known_hosts)
	globalKnown    []string // GlobalKnownHostsFile
	hostKeyAlias   string
	jumps          []*sshTarget // ProxyJump hops, first hop first
	connectTimeout time.Duration
	aliveInterval  time.Duration
	aliveCountMax  int
}

// addr is the host:port dialled (from the previous hop, for a jumped one).
func (t *sshTarget) addr() string { return hostPort(t.host, t.port) }

// String names the target in messages: user@host:port (via jumps).
func (t *sshTarget) String() string {
	s := t.user + "@" + t.addr()
	if t.alias != t.host {
		s += " (" + t.alias + ")"
	}
	if len(t.jumps) > 0 {
		var hops []string
		for _, j := range t.jumps {
			hops = append(hops, j.user+"@"+j.addr())
		}
		s += " via " + strings.Join(hops, ", ")
	}
	return s
}

// Defaults of the OpenSSH options remotedocker reads.
const (
	defaultConnectTimeout = 20 * time.Second
	defaultAliveInterval  = 15 * time.Second
	defaultAliveCountMax  = 3
	maxJumpDepth          = 5
)

func localUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

// resolveTarget applies the ssh config to alias. userArg and portArg are
// what docker_host (or a ProxyJump entry) wrote; they win over the config.
func resolveTarget(s *sshSettings, alias, userArg string, portArg, depth int) (*sshTarget, error) {
	if depth > maxJumpDepth {
		return nil, invalid("ProxyJump chain to %s is longer than %d hops (a loop in ~/.ssh/config?)", alias, maxJumpDepth)
	}
	t := &sshTarget{alias: alias, host: alias, user: userArg, port: portArg}
	if h := s.get(alias, "HostName"); h != "" {
		t.host = strings.ReplaceAll(h, "%h", alias)
	}
	if t.user == "" {
		t.user = s.get(alias, "User")
	}
	if t.user == "" {
		t.user = localUser()
	}
	if t.port == 0 {
		if p := s.get(alias, "Port"); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n <= 0 || n > 65535 {
				return nil, invalid("~/.ssh/config: Port %q for host %s is not a port number", p, alias)
			}
			t.port = n
		}
	}
	if t.port == 0 {
		t.port = 22
	}
	home, _ := os.UserHomeDir()
	t.readIdentities(s, home)
	t.readHostKeys(s, home)
	if err := t.readTimeouts(s); err != nil {
		return nil, err
	}
	if pc := s.get(alias, "ProxyCommand"); pc != "" && pc != "none" {
		return nil, invalid("~/.ssh/config: ProxyCommand (host %s) is not supported by remotedocker; use ProxyJump", alias)
	}
	if pj := s.get(alias, "ProxyJump"); pj != "" && pj != "none" {
		jumps, err := resolveJumps(s, alias, pj, depth)
		if err != nil {
			return nil, err
		}
		t.jumps = jumps
	}
	return t, nil
}

// readIdentities applies IdentityFile (else ssh's default keys under home)
// and IdentitiesOnly.
func (t *sshTarget) readIdentities(s *sshSettings, home string) {
	for _, f := range s.getAll(t.alias, "IdentityFile") {
		t.identityFiles = append(t.identityFiles, expandTokens(f, t, home))
	}
	if len(t.identityFiles) == 0 && home != "" {
		t.defaultIDs = true
		for _, name := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			t.identityFiles = append(t.identityFiles, filepath.Join(home, ".ssh", name))
		}
	}
	t.identitiesOnly = strings.EqualFold(s.get(t.alias, "IdentitiesOnly"), "yes")
}

// readHostKeys applies UserKnownHostsFile, GlobalKnownHostsFile (by default
// /etc/ssh/ssh_known_hosts) and HostKeyAlias.
func (t *sshTarget) readHostKeys(s *sshSettings, home string) {
	for _, key := range []string{"UserKnownHostsFile", "GlobalKnownHostsFile"} {
		var files []string
		for _, v := range s.getAll(t.alias, key) {
			for f := range strings.FieldsSeq(v) {
				files = append(files, expandTokens(f, t, home))
			}
		}
		if key == "UserKnownHostsFile" {
			t.knownHosts = files
		} else {
			t.globalKnown = files
		}
	}
	if t.globalKnown == nil {
		t.globalKnown = []string{"/etc/ssh/ssh_known_hosts"}
	}
	t.hostKeyAlias = s.get(t.alias, "HostKeyAlias")
}

// readTimeouts applies ConnectTimeout, ServerAliveInterval and
// ServerAliveCountMax over remotedocker's defaults.
func (t *sshTarget) readTimeouts(s *sshSettings) error {
	t.connectTimeout, t.aliveInterval, t.aliveCountMax = defaultConnectTimeout, defaultAliveInterval, defaultAliveCountMax
	n, err := t.intOption(s, "ConnectTimeout", 0, "a number of seconds")
	if err != nil {
		return err
	}
	if n > 0 {
		t.connectTimeout = time.Duration(n) * time.Second
	}
	// 0 turns ssh's keepalives off; remotedocker keeps its default, since
	// it must notice a dead link to fail calls cleanly.
	if n, err = t.intOption(s, "ServerAliveInterval", 0, "a number of seconds"); err != nil {
		return err
	}
	if n > 0 {
		t.aliveInterval = time.Duration(n) * time.Second
	}
	if n, err = t.intOption(s, "ServerAliveCountMax", 1, "a positive number"); err != nil {
		return err
	}
	if n > 0 {
		t.aliveCountMax = n
	}
	return nil
}

// intOption reads the option key of the target's host: a whole number no
// smaller than lowest, or 0 when the option is not set. want says what the
// value should be, for the error.
func (t *sshTarget) intOption(s *sshSettings, key string, lowest int, want string) (int, error) {
	v := s.get(t.alias, key)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lowest {
		return 0, invalid("~/.ssh/config: %s %q for host %s is not %s", key, v, t.alias, want)
	}
	return n, nil
}

// resolveJumps resolves alias's ProxyJump value pj into the hops to pass
// through, in order: each hop's own jumps come before it.
func resolveJumps(s *sshSettings, alias, pj string, depth int) ([]*sshTarget, error) {
	var jumps []*sshTarget
	for hop := range strings.SplitSeq(pj, ",") {
		hop = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(hop), "ssh://"))
		hu, hh, hp, err := splitUserHostPort(hop)
		if err != nil {
			return nil, invalid("~/.ssh/config: ProxyJump %q for host %s: %v", pj, alias, err)
		}
		jt, err := resolveTarget(s, hh, hu, hp, depth+1)
		if err != nil {
			return nil, err
		}
		jumps = append(jumps, jt.jumps...)
		jt.jumps = nil
		jumps = append(jumps, jt)
	}
	return jumps, nil
}

// splitUserHostPort parses [user@]host[:port] ([v6]:port too).
func splitUserHostPort(s string) (user, host string, port int, err error) {
	if i := strings.LastIndex(s, "@"); i >= 0 {
		user, s = s[:i], s[i+1:]
	}
	host = s
	if strings.HasPrefix(s, "[") || strings.Count(s, ":") == 1 {
		h, p, serr := splitHostPortLoose(s)
		if serr != nil {
			return "", "", 0, serr
		}
		host = h
		if p != "" {
			n, perr := strconv.Atoi(p)
			if perr != nil || n <= 0 || n > 65535 {
				return "", "", 0, fmt.Errorf("bad port %q", p)
			}
			port = n
		}
	}
	if host == "" {
		return "", "", 0, errors.New("empty host")
	}
	return user, host, port, nil
}

func splitHostPortLoose(s string) (string, string, error) {
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return "", "", fmt.Errorf("missing ] in %q", s)
		}
		host, rest := s[1:end], s[end+1:]
		return host, strings.TrimPrefix(rest, ":"), nil
	}
	host, port, _ := strings.Cut(s, ":")
	return host, port, nil
}

// expandTokens expands ~ and the % tokens ssh_config(5) allows in
// IdentityFile and UserKnownHostsFile.
func expandTokens(p string, t *sshTarget, home string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		p = filepath.Join(home, p[1:])
	}
	r := strings.NewReplacer("%%", "%", "%d", home, "%h", t.host, "%n", t.alias,
		"%p", strconv.Itoa(t.port), "%r", t.user, "%u", localUser())
	return r.Replace(p)
}
