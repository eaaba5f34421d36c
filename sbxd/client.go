package sbxd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/internal/sbxdbin"
	"github.com/sandboxkit/sandboxkit/internal/sbxdwire"
)

// DefaultAgentPath is where backends put sbxd inside a sandbox (the
// native backend mounts it there).
const DefaultAgentPath = "/.sbx/sbxd"

// defaultInjectDir is where the client copies a current sbxd into a
// sandbox whose own is missing or stale: a directory per binary, named by
// its hash.
const defaultInjectDir = "/tmp/.sbxd"

// AgentPather is implemented by sandboxes whose backend puts sbxd at a path
// of its own choosing (found through Unwrap chains); Wrap starts the agent
// there instead of at DefaultAgentPath.
type AgentPather interface {
	SbxdPath() string
}

// AgentHomer is implemented by sandboxes that give the agent a folder of
// their own, removed with the sandbox: local's sandboxes are host folders,
// so the agent's copy and its background jobs' output belong in the
// sandbox's state folder, not in the host's shared /tmp. Wrap uses it
// unless WithInjectDir or WithStateDir say otherwise.
type AgentHomer interface {
	AgentHome() string
}

// errNoAttacher: the sandbox cannot start the agent at all (by design, as
// with backends that have a daemon of their own), so falling back is not
// worth a warning.
var errNoAttacher = errors.New("no attached exec (backend.Attacher) to start sbxd with")

// handshakeTimeout bounds starting the agent and its hello.
const handshakeTimeout = 30 * time.Second

// ErrAgentLost is wrapped by the error of calls that were in flight when
// the agent or its stream died. The next call starts a new agent.
var ErrAgentLost = errors.New("sbxd agent connection lost")

// Option configures a Client.
type Option func(*options)

type options struct {
	log       *slog.Logger
	agentPath string
	binary    func(arch string) ([]byte, error)
	inject    bool
	injectDir string
	lazy      bool
	dialOnly  bool
	stateDir  string
	bulk      int64
	// noUsers: the wrapped backend's Capabilities say it cannot run
	// commands as another user, so the agent does not either (see
	// userByAgent).
	noUsers bool
}

// WithLogger sets the logger (default: discard). The fallback warning and
// the agent's own stderr (at debug level) go there.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

// WithAgentPath sets where sbxd is inside the sandbox (default
// DefaultAgentPath). For the local backend this is a host path.
func WithAgentPath(p string) Option { return func(o *options) { o.agentPath = p } }

// WithBinary sets where the client gets an sbxd binary to copy into a
// sandbox whose agent is missing or stale (default: sbxd_path-style lookup
// of internal/sbxdbin: $SBX_SBXD_PATH, else the embedded binary for the
// sandbox's architecture).
func WithBinary(fn func(arch string) ([]byte, error)) Option {
	return func(o *options) { o.binary = fn }
}

// WithInjectDir sets the directory inside the sandbox that a current sbxd
// is copied into when needed (default /tmp/.sbxd). For a backend without
// isolation (local), pick a directory only the user can write: another
// user who controls the directory could swap the binary.
func WithInjectDir(dir string) Option { return func(o *options) { o.injectDir = dir } }

// WithoutInjection never copies sbxd into a sandbox: when the agent at the
// agent path cannot start or is stale, the client falls back.
func WithoutInjection() Option { return func(o *options) { o.inject = false } }

// DefaultBulkThreshold is the file size from which WriteFile and ReadFile
// move the bytes through the wrapped sandbox's own backend.FileSystem when
// it has one (the container engine's archive API, a host file), which
// moves bulk data faster than an attached exec stream; the agent still
// resolves the path and makes the write atomic.
const DefaultBulkThreshold = 8 << 20

// WithBulkThreshold sets the size from which file contents bypass the
// agent's stream (see DefaultBulkThreshold); negative: never.
func WithBulkThreshold(n int64) Option { return func(o *options) { o.bulk = n } }

// WithDialOnly uses only an agent the sandbox serves itself
// (backend.AgentDialer), never starting one: for a few commands in a
// process of their own (a CLI), starting an agent would cost more than it
// saves. Without such an agent the client uses the sandbox's own paths.
func WithDialOnly() Option { return func(o *options) { o.dialOnly = true } }

// WithLazyStart starts the agent on first use instead of in Wrap.
func WithLazyStart() Option { return func(o *options) { o.lazy = true } }

// WithStateDir sets the agent's directory for background jobs inside the
// sandbox (default /tmp/.sbxd/jobs-<sandbox ID>).
func WithStateDir(dir string) Option { return func(o *options) { o.stateDir = dir } }

// Client is a sandbox whose Exec and file operations go through one sbxd
// agent started inside it, multiplexed over the agent's stdin and stdout.
// When the agent cannot start, every call takes the wrapped sandbox's own
// path instead. It is safe for concurrent use.
type Client struct {
	sb   backend.Sandbox
	opts options
	// with are the options Wrap was given, for Fork to wrap forks with.
	with []Option

	mu       sync.Mutex
	conn     *agentConn
	fallback error // why the agent is not used; nil while it is
	// started: an agent ran in this sandbox before, so a failed restart
	// (a paused sandbox, say) is retried after retryAt rather than given up.
	started bool
	retryAt time.Time
	closed  bool
}

var (
	_ backend.Sandbox    = (*Client)(nil)
	_ backend.FileSystem = (*Client)(nil)
	_ backend.Wrapper    = (*Client)(nil)
)

// Wrap returns sb with Exec and file access through an sbxd agent, which it
// starts through sb's backend.Attacher capability (unless WithLazyStart).
// When the agent cannot start (no Attacher, no binary for the sandbox's
// architecture, a noexec file system, ...), Wrap logs a warning and
// returns a Client that uses sb's own paths; the error is only for a
// cancelled ctx.
func Wrap(ctx context.Context, sb backend.Sandbox, opts ...Option) (*Client, error) {
	o := options{log: slog.New(slog.DiscardHandler), inject: true, injectDir: defaultInjectDir, bulk: DefaultBulkThreshold}
	for _, opt := range opts {
		opt(&o)
	}
	if o.agentPath == "" {
		o.agentPath = DefaultAgentPath
		if ap, ok := backend.As[AgentPather](sb); ok {
			o.agentPath = ap.SbxdPath()
		}
	}
	if ah, ok := backend.As[AgentHomer](sb); ok && o.injectDir == defaultInjectDir && o.stateDir == "" {
		o.injectDir, o.stateDir = ah.AgentHome(), ah.AgentHome()+"/jobs"
	}
	if o.stateDir == "" {
		o.stateDir = o.injectDir + "/jobs-" + safeName(sb.ID())
	}
	c := &Client{sb: sb, opts: o, with: opts}
	if !o.lazy {
		if _, err := c.agent(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// Unwrap returns the wrapped sandbox.
func (c *Client) Unwrap() backend.Sandbox { return c.sb }

func (c *Client) ID() string                                     { return c.sb.ID() }
func (c *Client) Info(ctx context.Context) (backend.Info, error) { return c.sb.Info(ctx) }

// Destroy stops the agent and destroys the sandbox.
func (c *Client) Destroy(ctx context.Context) error {
	c.Close()
	return c.sb.Destroy(ctx)
}

// Close stops using the agent: its stdin closes, so it exits once its
// background jobs have ended. The sandbox keeps running; calls after Close
// take the wrapped sandbox's own paths.
func (c *Client) Close() error {
	c.mu.Lock()
	conn := c.conn
	c.conn, c.closed = nil, true
	c.mu.Unlock()
	if conn != nil {
		conn.close()
	}
	return nil
}

// Fallback returns why the agent is not in use (nil while it is, or before
// it was first needed).
func (c *Client) Fallback() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fallback
}

// AgentInfo describes a running agent.
type AgentInfo struct {
	PID     int    // inside the sandbox
	Version string // e.g. "sbxd/1"
	Path    string // of the binary inside the sandbox
	UID     int
	Arch    string
	// Dialled: the agent the sandbox started with itself, reached through
	// backend.AgentDialer (not one this client started through Attach).
	Dialled bool
}

// Agent returns the running agent, starting it if needed. It fails,
// wrapping errors.ErrUnsupported, when the client has fallen back.
func (c *Client) Agent(ctx context.Context) (AgentInfo, error) {
	conn, err := c.agent(ctx)
	if err != nil {
		return AgentInfo{}, err
	}
	if conn == nil {
		return AgentInfo{}, fmt.Errorf("%w: no sbxd agent: %v", errors.ErrUnsupported, c.Fallback())
	}
	return AgentInfo{PID: conn.hello.PID, Version: conn.hello.Version, Path: conn.path, UID: conn.hello.UID, Arch: conn.hello.Arch, Dialled: conn.dialled}, nil
}

// agent returns the live agent connection, starting one when there is
// none; nil (and no error) means: fall back to the wrapped sandbox.
func (c *Client) agent(ctx context.Context) (*agentConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil && !c.conn.dead() {
		return c.conn, nil
	}
	if c.closed || (c.fallback != nil && (!c.started || time.Now().Before(c.retryAt))) {
		return nil, nil
	}
	if c.conn != nil {
		c.opts.log.Info("sbxd agent stopped; starting a new one", "sandbox", c.sb.ID(), "cause", c.conn.cause())
		c.conn = nil
	}
	conn, err := c.start(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, backend.WrapOp("sbxd", "sbxd", c.sb.ID(), ctx.Err())
		}
		c.fallback = err
		c.retryAt = time.Now().Add(restartBackoff)
		level := slog.LevelWarn
		if errors.Is(err, errNoAttacher) {
			level = slog.LevelDebug
		}
		c.opts.log.Log(ctx, level, "sbxd agent unavailable; using the plain per-command path (slower)", "sandbox", c.sb.ID(), "err", err)
		return nil, nil
	}
	c.conn, c.fallback, c.started = conn, nil, true
	return conn, nil
}

// restartBackoff is how long a client whose agent ran before but cannot be
// restarted uses the plain path before it tries again.
const restartBackoff = 10 * time.Second

// forget drops conn after a failure, so the next call starts a new agent.
func (c *Client) forget(conn *agentConn) {
	c.mu.Lock()
	if c.conn == conn {
		c.conn = nil
	}
	c.mu.Unlock()
	conn.close()
}

// start launches the agent at the agent path and, when that one is missing
// or stale, a current copy injected into the sandbox.
func (c *Client) start(ctx context.Context) (*agentConn, error) {
	// An agent the sandbox started with itself is the fastest to reach.
	if d, ok := backend.As[backend.AgentDialer](c.sb); ok {
		dctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
		conn, err := c.dial(dctx, d)
		cancel()
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		c.opts.log.Debug("the sandbox's own agent did not answer; starting one", "sandbox", c.sb.ID(), "err", err)
	}
	att, ok := backend.As[backend.Attacher](c.sb)
	if !ok || c.opts.dialOnly {
		return nil, fmt.Errorf("%w: sandbox %s: %w", errors.ErrUnsupported, c.sb.ID(), errNoAttacher)
	}
	ctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	conn, err := c.launch(ctx, att, c.opts.agentPath)
	if err == nil || !c.opts.inject || ctx.Err() != nil {
		return conn, err
	}
	c.opts.log.Debug("sbxd at the agent path did not start; injecting a current one", "sandbox", c.sb.ID(), "path", c.opts.agentPath, "err", err)
	p, ierr := c.inject(ctx)
	if ierr != nil {
		return nil, fmt.Errorf("%v; injecting sbxd: %w", err, ierr)
	}
	conn, err2 := c.launchInjected(ctx, att, p)
	if err2 != nil {
		return nil, fmt.Errorf("%v; injected %s: %w", err, p, err2)
	}
	return conn, nil
}

// launchInjected launches a copy inject just wrote. Where the sandbox's
// files are this process's (local), another goroutine that forks while the
// copy is open for writing leaves a writable descriptor of it in its child
// until that child execs, and starting the copy meanwhile fails with
// ETXTBSY (golang/go#22315): it happens when a process starts agents in
// several new sandboxes at once, as a pool does. Such a start is tried
// again shortly.
func (c *Client) launchInjected(ctx context.Context, att backend.Attacher, p string) (*agentConn, error) {
	delay := 5 * time.Millisecond
	for {
		conn, err := c.launch(ctx, att, p)
		if err == nil || !errors.Is(err, syscall.ETXTBSY) || delay > time.Second {
			return conn, err
		}
		c.opts.log.Debug("the injected sbxd is still open for writing somewhere (text file busy); starting it again", "sandbox", c.sb.ID(), "in", delay)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, err
		}
		delay *= 2
	}
}

// inject copies the sbxd binary for the sandbox's architecture into it and
// returns its path.
func (c *Client) inject(ctx context.Context) (string, error) {
	arch := c.arch(ctx)
	var bin []byte
	var err error
	if c.opts.binary != nil {
		bin, err = c.opts.binary(arch)
	} else {
		bin, err = sbxdbin.Find("", arch)
	}
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(bin)
	p := c.opts.injectDir + "/" + hex.EncodeToString(sum[:8]) + "/sbxd"
	// A copy made earlier is used only when its bytes are this binary's.
	if same, err := sameContent(ctx, c.sb, p, bin); err == nil && same {
		return p, nil
	}
	if err := sbfiles.WriteFile(ctx, c.sb, p, bytes.NewReader(bin), 0o755); err != nil {
		return "", err
	}
	return p, nil
}

// sameContent reports whether the file p in sb holds exactly want.
func sameContent(ctx context.Context, sb backend.Sandbox, p string, want []byte) (bool, error) {
	fi, err := sbfiles.Stat(ctx, sb, p)
	if err != nil || fi.Size() != int64(len(want)) || fi.Mode().Perm()&0o111 == 0 {
		return false, err
	}
	rc, err := sbfiles.ReadFile(ctx, sb, p)
	if err != nil {
		return false, err
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(rc, int64(len(want))+1)); err != nil {
		return false, err
	}
	return bytes.Equal(h.Sum(nil), sha256Of(want)), nil
}

func sha256Of(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

// arch asks the sandbox for its machine architecture (uname -m), assuming
// the host's when it cannot say.
func (c *Client) arch(ctx context.Context) string {
	res, err := c.sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"uname", "-m"}, Timeout: 10 * time.Second})
	if err == nil && res.ExitCode == 0 {
		if a := strings.TrimSpace(string(res.Stdout)); a != "" {
			return sbxdbin.NormalizeArch(a)
		}
	}
	return runtime.GOARCH
}

// launch starts `path serve` and shakes hands.
func (c *Client) launch(ctx context.Context, att backend.Attacher, path string) (*agentConn, error) {
	// The agent lives until Close, not until ctx ends.
	life, stop := context.WithCancel(context.WithoutCancel(ctx))
	stderr := &lineLogger{log: c.opts.log, sandbox: c.sb.ID()}
	proc, err := att.Attach(life, backend.ExecRequest{
		Cmd:    []string{path, "serve", "--state-dir", c.opts.stateDir},
		Stderr: stderr,
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("starting %s serve: %w", path, err)
	}
	// Closing stdin lets the agent exit once its background jobs end; it
	// is not killed, so they keep their output.
	conn, err := newAgentConn(procConn{proc, sbxdwire.NewCoalescingWriter(proc.Stdin())}, path, stop, func() { proc.Stdin().Close() })
	if err != nil {
		proc.Kill()
		stop()
		return nil, err
	}
	go func() {
		code, err := proc.Wait()
		cause := fmt.Errorf("the agent exited with code %d", code)
		if err != nil {
			cause = fmt.Errorf("the agent's stream ended: %w", err)
		}
		if msg := stderr.last(); msg != "" {
			cause = fmt.Errorf("%w (its last message: %s)", cause, msg)
		}
		conn.setCause(cause)
		conn.sess.Close()
		stop()
	}()
	if err := c.shake(ctx, conn); err != nil {
		conn.close()
		proc.Kill()
		return nil, err
	}
	return conn, nil
}

// dial connects to the agent the sandbox started with itself.
func (c *Client) dial(ctx context.Context, d backend.AgentDialer) (*agentConn, error) {
	nc, err := d.DialAgent(ctx)
	if err != nil {
		return nil, err
	}
	conn, err := newAgentConn(nc, "the sandbox's agent", func() {}, func() { nc.Close() })
	if err != nil {
		nc.Close()
		return nil, err
	}
	conn.dialled = true
	if err := c.shake(ctx, conn); err != nil {
		conn.close()
		return nil, err
	}
	// The socket is in a folder the sandbox can write: it could have put
	// a link to another sandbox's agent there.
	if conn.hello.Sandbox != c.sb.ID() {
		conn.close()
		return nil, fmt.Errorf("the agent at the sandbox's socket serves sandbox %q, not %q", conn.hello.Sandbox, c.sb.ID())
	}
	return conn, nil
}

// newAgentConn opens a session over an agent's stream. closeStream ends the
// stream when the session ends.
func newAgentConn(stream io.ReadWriteCloser, path string, stop context.CancelFunc, closeStream func()) (*agentConn, error) {
	sess, err := yamux.Client(stream, sbxdwire.YamuxConfig())
	if err != nil {
		return nil, err
	}
	conn := &agentConn{path: path, stop: stop, sess: sess, closeStream: closeStream, done: make(chan struct{})}
	go func() {
		<-sess.CloseChan()
		conn.setCause(errors.New("the stream to the agent closed"))
		close(conn.done)
		closeStream()
	}()
	conn.http = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return sess.Open()
		},
		// Large buffers make large stream frames for file copies.
		WriteBufferSize:     256 << 10,
		ReadBufferSize:      256 << 10,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
		// One stream per request keeps the choice of headers free of
		// hop-by-hop surprises; idle streams are reused.
		ForceAttemptHTTP2: false,
	}}
	return conn, nil
}

// shake checks that the agent speaks this client's protocol.
func (c *Client) shake(ctx context.Context, conn *agentConn) error {
	var h sbxdwire.Hello
	if err := conn.getJSON(ctx, sbxdwire.RouteHello, &h); err != nil {
		return fmt.Errorf("%s serve: no hello: %w", conn.path, err)
	}
	if h.Protocol != ProtocolVersion {
		return fmt.Errorf("%s is stale: it speaks protocol %d (%s), this client %d", conn.path, h.Protocol, h.Version, ProtocolVersion)
	}
	conn.hello = h
	c.opts.log.Debug("sbxd agent started", "sandbox", c.sb.ID(), "path", conn.path, "pid", h.PID, "version", h.Version)
	return nil
}

// agentConn is one running agent and the session to it.
type agentConn struct {
	path    string
	sess    *yamux.Session
	http    *http.Client
	hello   sbxdwire.Hello
	stop    context.CancelFunc
	dialled bool // through backend.AgentDialer
	// closeStream ends the stream under sess (the agent's stdin, or the
	// dialled connection).
	closeStream func()

	done    chan struct{} // closed when the session ended
	causeMu sync.Mutex
	why     error
}

func (a *agentConn) dead() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

func (a *agentConn) setCause(err error) {
	a.causeMu.Lock()
	if a.why == nil {
		a.why = err
	}
	a.causeMu.Unlock()
}

func (a *agentConn) cause() error {
	a.causeMu.Lock()
	defer a.causeMu.Unlock()
	if a.why == nil {
		return errors.New("the stream to the agent closed")
	}
	return a.why
}

func (a *agentConn) close() {
	a.sess.Close()
	a.closeStream()
	if tr, ok := a.http.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
}

// procConn is the agent's stdin and stdout as one connection.
type procConn struct {
	p backend.Process
	w io.Writer // p's stdin, coalescing frames
}

func (c procConn) Read(b []byte) (int, error)  { return c.p.Stdout().Read(b) }
func (c procConn) Write(b []byte) (int, error) { return c.w.Write(b) }
func (c procConn) Close() error                { return c.p.Stdin().Close() }

// lineLogger logs the agent's stderr line by line and keeps the last line
// for error messages.
type lineLogger struct {
	log     *slog.Logger
	sandbox string
	mu      sync.Mutex
	buf     []byte
	lastMsg string
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimSpace(string(l.buf[:i]))
		l.buf = l.buf[i+1:]
		if line != "" {
			l.lastMsg = line
			l.log.Debug("sbxd agent", "sandbox", l.sandbox, "msg", line)
		}
	}
	if len(l.buf) > 4096 {
		l.buf = l.buf[:0]
	}
	return len(p), nil
}

func (l *lineLogger) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := strings.TrimSpace(string(l.buf)); s != "" {
		return s
	}
	return l.lastMsg
}

// agentURL is the base of every request; the host is a placeholder.
const agentURL = "http://sbxd"

// do sends one request and turns transport failures into ErrAgentLost when
// the session is gone.
func (a *agentConn) do(req *http.Request) (*http.Response, error) {
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, a.transportErr(req.Context(), err)
	}
	return resp, nil
}

// transportErr explains an error of the connection (not of the
// operation).
func (a *agentConn) transportErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if a.dead() || a.pingFails() {
		return fmt.Errorf("%w: %v (in-flight calls fail; the next call starts a new agent)", ErrAgentLost, a.cause())
	}
	return err
}

// pingFails reports whether the session no longer answers.
func (a *agentConn) pingFails() bool {
	if a.sess.IsClosed() {
		return true
	}
	_, err := a.sess.Ping()
	return err != nil
}

func (a *agentConn) getJSON(ctx context.Context, route string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, agentURL+route, nil)
	if err != nil {
		return err
	}
	return a.roundTrip(req, v)
}

// postJSON sends in as JSON and decodes the answer into out.
func (a *agentConn) postJSON(ctx context.Context, route string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, agentURL+route, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return a.roundTrip(req, out)
}

func (a *agentConn) roundTrip(req *http.Request, out any) error {
	resp, err := a.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return responseError(resp)
	}
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return a.transportErr(req.Context(), fmt.Errorf("decoding the agent's answer: %w", err))
	}
	return nil
}

// remoteError is a failed call as the agent reported it.
type remoteError struct{ w sbxdwire.ErrorBody }

func (e *remoteError) Error() string { return e.w.Msg }
func (e *remoteError) Unwrap() error { return e.w.Cause() }

func responseError(resp *http.Response) error {
	var we sbxdwire.ErrorBody
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(body, &we); err != nil || we.Code == "" {
		return fmt.Errorf("sbxd: unexpected answer %s: %q", resp.Status, bytes.TrimSpace(body))
	}
	return &remoteError{we}
}

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ndjsonReader reads an NDJSON answer line by line.
func ndjsonReader(r io.Reader) *json.Decoder {
	return json.NewDecoder(bufio.NewReaderSize(r, 64<<10))
}
