package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/term"
	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/session"
)

func (a *app) upCmd() *cobra.Command {
	var opts upOptions
	cmd := &cobra.Command{
		Use:   "up [NAME...]",
		Short: "Launch the configured sandboxes as one session and leave it running",
		Long: `Up launches a session: the named config entries (default: every entry), each
with its initializer (main, neo4j, joern, gdb_mcp, or a plain sandbox), on a
session network with shared /shared, /bash_tools and /sandbox_scripts volumes.
Sandboxes start concurrently, are provisioned in dependency order and probed
until ready; progress shows each one's steps with durations. It prints the
session ID, each sandbox's endpoints (host:port, or the URL of a port the
backend publishes only as an HTTP route) and its services' URLs (such as
gdb_mcp's MCP endpoint); a port the host cannot reach is a warning. The
session has no owner and outlives sbx: end it with sbx down ID (sbx status
lists sessions). If any sandbox fails, everything the launch made is
removed again.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.up(cmd.Context(), args, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.id, "id", "", "session ID (default: a random one)")
	f.StringVar(&opts.bashTools, "bash-tools", "", "host folder copied into the session's /bash_tools volume")
	f.StringVar(&opts.scripts, "sandbox-scripts", "", "host folder copied into the session's read-only /sandbox_scripts volume")
	f.StringVar(&opts.manifest, "from-manifest", "", "start sandboxes from the images of a checkpoint manifest")
	return cmd
}

type upOptions struct {
	id, bashTools, scripts, manifest string
}

type upMember struct {
	Name string `json:"name"`
	Type string `json:"type"`
	ID   string `json:"id"`
	// Endpoints maps a published port to the host:port a host program
	// dials, or to an http:// URL when the backend publishes the port only
	// as an HTTP route.
	Endpoints map[string]string `json:"endpoints,omitempty"`
	// URLs are the member's services as its initializer names them, with
	// their paths (gdb_mcp's MCP endpoint, neo4j's bolt and HTTP URIs).
	URLs []string `json:"urls,omitempty"`
	// Isolation is what separates the sandbox from the host.
	Isolation backend.Isolation `json:"isolation"`
}

type upResult struct {
	Session   string            `json:"session"`
	Sandboxes []upMember        `json:"sandboxes"`
	Env       map[string]string `json:"env,omitempty"`
	Warnings  []string          `json:"warnings,omitempty"`
}

func (a *app) up(ctx context.Context, names []string, opts upOptions) error {
	open := a.open
	if len(names) == 0 {
		open = a.openLaunching
	}
	cfg, b, err := open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	l := &session.Launcher{Config: cfg, Backend: b, Logger: a.logger, ID: opts.id,
		BashToolsDir: opts.bashTools, SandboxScriptsDir: opts.scripts}
	if opts.manifest != "" {
		if l.Manifest, err = session.LoadManifest(opts.manifest); err != nil {
			return err
		}
	}
	disp, err := newSessionDisplay(a.progress, a.stderr)
	if err != nil {
		return err
	}
	l.Progress = disp.report
	var s *session.Session
	if name, ok := pooledUp(cfg, names, opts); ok {
		s, err = a.upPooled(ctx, l, b, name)
	} else {
		s, err = l.Launch(ctx, names...)
	}
	disp.close()
	if err != nil {
		return err
	}
	res, err := describeSession(ctx, s)
	if err != nil {
		return err
	}
	return a.printSession(res)
}

// pooledUp names the entry whose session pool sbx up claims from: a
// launch of one entry that has a [pool] table, with no option that makes
// its session differ from the pool's (--id, --bash-tools,
// --sandbox-scripts, --from-manifest).
func pooledUp(cfg *config.Config, names []string, opts upOptions) (string, bool) {
	if opts != (upOptions{}) {
		return "", false
	}
	if len(names) == 0 {
		names = cfg.SandboxNames()
	}
	if len(names) != 1 {
		return "", false
	}
	e, err := cfg.Entry(names[0])
	return names[0], err == nil && e.Pool != nil
}

// upPooled claims a ready session of entry name (sbx pool keep --sessions
// keeps them), else launches one as without a pool.
func (a *app) upPooled(ctx context.Context, l *session.Launcher, b backend.Backend, name string) (*session.Session, error) {
	p, err := l.NewSessionPool(b, name)
	if err != nil {
		return nil, err
	}
	c, err := p.Acquire(ctx, session.Binding{})
	if err != nil {
		return nil, err
	}
	a.logger.Debug("session claimed", "session", c.Session, "warm", c.Warm, "pool", p.Key())
	if c.Warm {
		fmt.Fprintf(a.stderr, "%s: a ready session from the pool\n", name)
	}
	s, err := l.Resume(ctx, c.Session)
	if err != nil {
		c.Release()
		p.Close(context.WithoutCancel(ctx))
	}
	return s, err
}

// describeSession collects a session's members, their host endpoints and
// service URLs. A port the host cannot reach is a warning that says why.
func describeSession(ctx context.Context, s *session.Session) (upResult, error) {
	res := upResult{Session: s.ID, Env: s.Env, Warnings: slices.Clone(s.Warnings)}
	isolation := isolationOf(s.Backend())
	for _, m := range s.Members() {
		um := upMember{Name: m.Name, Type: m.Type, ID: m.Sandbox.ID(), URLs: serviceURLs(m.Handle)}
		info, err := m.Sandbox.Info(ctx)
		if err != nil {
			info = backend.Info{}
		}
		um.Isolation = isolation(info)
		for _, p := range m.Ports {
			addr, err := s.Endpoint(ctx, m.Name, p)
			if re, ok := errors.AsType[*opensandbox.RouteError](err); ok {
				addr = re.URL
				res.Warnings = append(res.Warnings, fmt.Sprintf("%s: %v", m.Name, err))
			} else if err != nil {
				res.Warnings = append(res.Warnings, fmt.Sprintf("%s: port %d is not reachable from this host: %v", m.Name, p, err))
				continue
			}
			if um.Endpoints == nil {
				um.Endpoints = map[string]string{}
			}
			um.Endpoints[strconv.Itoa(p)] = addr
		}
		res.Sandboxes = append(res.Sandboxes, um)
	}
	return res, nil
}

// serviceURLs are the URLs an initializer's handle names: gdb_mcp's MCP
// endpoint and its SSE one (OpenSage's clients speak SSE), neo4j's.
func serviceURLs(handle any) []string {
	var out []string
	if h, ok := handle.(interface{ URL() string }); ok {
		out = append(out, h.URL())
	}
	if h, ok := handle.(interface{ SSEURL() string }); ok && !slices.Contains(out, h.SSEURL()) {
		out = append(out, h.SSEURL())
	}
	if h, ok := handle.(interface{ BoltURI() string }); ok {
		out = append(out, h.BoltURI())
	}
	if h, ok := handle.(interface{ HTTPURL() string }); ok {
		out = append(out, h.HTTPURL())
	}
	return out
}

func (a *app) printSession(res upResult) error {
	if a.json {
		return printJSON(a.stdout, res)
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(a.stderr, "warning: %s\n", w)
	}
	fmt.Fprintf(a.stdout, "session %s\n", res.Session)
	t := newTable(a.stdout, "NAME", "TYPE", "ID", "ISOLATION", "ENDPOINTS", "URLS")
	for _, m := range res.Sandboxes {
		var eps []string
		for _, p := range slices.SortedFunc(maps.Keys(m.Endpoints), func(x, y string) int {
			a, _ := strconv.Atoi(x)
			b, _ := strconv.Atoi(y)
			return a - b
		}) {
			eps = append(eps, p+"->"+m.Endpoints[p])
		}
		t.row(m.Name, m.Type, m.ID, string(m.Isolation), orDash(strings.Join(eps, " ")), orDash(strings.Join(m.URLs, " ")))
	}
	return t.flush()
}

// sessionDisplay shows each sandbox's launch steps on stderr: on a
// terminal one live line per sandbox, redrawn in place; otherwise one line
// per step.
type sessionDisplay struct {
	mu      sync.Mutex
	w       io.Writer
	live    bool
	none    bool
	order   []string
	lines   map[string]string
	drawn   int
	lastKey map[string]string
	last    time.Time
}

func newSessionDisplay(mode string, w io.Writer) (*sessionDisplay, error) {
	d := &sessionDisplay{w: w, lines: map[string]string{}, lastKey: map[string]string{}}
	switch mode {
	case progressAuto, "":
		_, d.live = term.GetFdInfo(w)
	case progressBars:
		d.live = true
	case progressPlain:
	case progressNone:
		d.none = true
	default:
		return nil, fmt.Errorf("--progress %q: want auto, tty, plain or none", mode)
	}
	return d, nil
}

// stepText renders one progress event.
func stepText(p session.Progress) string {
	var b strings.Builder
	b.WriteString(p.Step)
	if p.Detail != "" {
		b.WriteString(" " + p.Detail)
	}
	if p.Step == session.StepPulling && p.Total > 0 {
		fmt.Fprintf(&b, " (%s/%s)", humanBytes(p.Current), humanBytes(p.Total))
	}
	if p.Err != nil && p.Step == session.StepFailed {
		msg, _, _ := strings.Cut(p.Err.Error(), "\n")
		b.WriteString(": " + msg)
	}
	fmt.Fprintf(&b, " [%s]", p.Elapsed.Round(100*time.Millisecond))
	return b.String()
}

func (d *sessionDisplay) report(p session.Progress) {
	if d.none {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.lines[p.Sandbox]; !ok {
		d.order = append(d.order, p.Sandbox)
	}
	text := stepText(p)
	d.lines[p.Sandbox] = text
	if !d.live {
		// Plain: a line per change of step or detail (byte counts and
		// times aside).
		key := p.Step + "\x00" + p.Detail
		if d.lastKey[p.Sandbox] == key {
			return
		}
		d.lastKey[p.Sandbox] = key
		fmt.Fprintf(d.w, "[%s] %s\n", p.Sandbox, text)
		return
	}
	// Live: redraw at most every 100ms, and on every step change.
	key := p.Step
	if d.lastKey[p.Sandbox] == key && time.Since(d.last) < 100*time.Millisecond {
		return
	}
	d.lastKey[p.Sandbox] = key
	d.redraw()
}

// redraw rewrites the block of sandbox lines in place.
func (d *sessionDisplay) redraw() {
	d.last = time.Now()
	var b strings.Builder
	if d.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", d.drawn)
	}
	width := 0
	for _, n := range d.order {
		width = max(width, len(n))
	}
	for _, n := range d.order {
		fmt.Fprintf(&b, "\r\x1b[2K%-*s  %s\n", width, n, d.lines[n])
	}
	d.drawn = len(d.order)
	io.WriteString(d.w, b.String())
}

func (d *sessionDisplay) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.live && len(d.order) > 0 {
		d.redraw()
	}
}
