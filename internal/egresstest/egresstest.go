// Package egresstest is the backend-neutral part of the egress tests: a
// sandbox with a policy on the fake internet (package fakenet) is probed
// with internal/netprobe, run inside it, and every backend that enforces
// policies passes the same checks.
package egresstest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/internal/egressctl"
	"github.com/sandboxkit/sandboxkit/internal/fakenet"
	"github.com/sandboxkit/sandboxkit/internal/syncbuf"
)

var (
	probeOnce sync.Once
	probePath string
	probeErr  error
)

// Netprobe builds internal/netprobe once per test binary and returns it:
// the program the tests run in sandboxes to try the network.
func Netprobe(t testing.TB) []byte {
	t.Helper()
	probeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sbx-netprobe-")
		if err != nil {
			probeErr = err
			return
		}
		probePath = filepath.Join(dir, "netprobe")
		cmd := exec.Command("go", "build", "-o", probePath, "github.com/sandboxkit/sandboxkit/internal/netprobe")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			probeErr = errors.New(string(out))
		}
	})
	require.NoError(t, probeErr, "building netprobe")
	data, err := os.ReadFile(probePath)
	require.NoError(t, err)
	return data
}

// Env is a sandbox with a policy, on the fake internet.
type Env struct {
	Net     *fakenet.Net
	Ctl     backend.EgressController
	Sandbox backend.Sandbox
}

// NewEnv is sb, with a policy, on fn, with netprobe installed.
func NewEnv(t testing.TB, fn *fakenet.Net, ctl backend.EgressController, sb backend.Sandbox) *Env {
	t.Helper()
	e := &Env{Net: fn, Ctl: ctl, Sandbox: sb}
	e.Install(t)
	return e
}

// Install writes netprobe to /netprobe in the sandbox.
func (e *Env) Install(t testing.TB) {
	t.Helper()
	require.NoError(t, sbfiles.WriteFile(t.Context(), e.Sandbox, "/netprobe", bytes.NewReader(Netprobe(t)), 0o755))
}

// Probe runs netprobe in the sandbox; ok reports exit status 0.
func (e *Env) Probe(t testing.TB, args ...string) (out string, ok bool) {
	t.Helper()
	res, err := e.Sandbox.Exec(t.Context(), backend.ExecRequest{Cmd: append([]string{"/netprobe"}, args...), Timeout: 30 * time.Second})
	require.NoError(t, err)
	return strings.TrimSpace(string(res.Stdout) + string(res.Stderr)), res.ExitCode == 0
}

// MustReach requires netprobe args to succeed with output want.
func (e *Env) MustReach(t testing.TB, want string, args ...string) {
	t.Helper()
	out, ok := e.Probe(t, args...)
	require.True(t, ok, "netprobe %v was refused: %s", args, out)
	require.Equal(t, want, out, "netprobe %v", args)
}

// MustFail requires netprobe args to fail, and returns its output.
func (e *Env) MustFail(t testing.TB, args ...string) string {
	t.Helper()
	out, ok := e.Probe(t, args...)
	require.False(t, ok, "netprobe %v got through: %s", args, out)
	return out
}

// Policy is the policy Run expects: allowed.test and *.allowed.test on
// port 80 but api.allowed.test, and other.test only by its address, on
// ports 80 and 7.
func Policy(fn *fakenet.Net) backend.Egress {
	return backend.Egress{
		Default: "deny",
		Allow:   []string{"allowed.test", "*.allowed.test:80", fn.Addr("other.test").String() + ":80,7"},
		Deny:    []string{"api.allowed.test"},
	}
}

// Run checks e, made with Policy, from inside: what it reaches, what it
// does not, what is recorded, that root in it cannot get around the
// enforcer (enforcerAlive checks, the backend's way, that the enforcer
// outlived `kill -9 -1` in the sandbox), and that a policy change applies
// to open connections. It changes the policy last.
func Run(t *testing.T, e *Env, enforcerAlive func(t *testing.T)) {
	addr := func(name string) string { return e.Net.Addr(name).String() }
	allowed, denied, other := addr("allowed.test"), addr("denied.test"), addr("other.test")
	id := e.Sandbox.ID()

	t.Run("allowed name over HTTP and HTTPS", func(t *testing.T) {
		e.MustReach(t, allowed, "lookup", "allowed.test")
		e.MustReach(t, "hello from allowed.test", "get", "http://allowed.test/")
		e.MustReach(t, "hello from allowed.test", "get", "https://allowed.test/")
		e.MustReach(t, "hello from www.allowed.test", "get", "http://www.allowed.test/")
	})
	t.Run("port and deny rules", func(t *testing.T) {
		// *.allowed.test only on port 80; api.allowed.test denied.
		e.MustFail(t, "get", "https://www.allowed.test/")
		e.MustFail(t, "get", "http://api.allowed.test/")
	})
	t.Run("denied names do not resolve and never reach the DNS server", func(t *testing.T) {
		// The fake internet is shared by a test process's parallel tests,
		// and an enforcer whose policy denies denied.test by name resolves
		// it itself (to refuse its addresses), so the upstream count is
		// taken for names only this sandbox asks for.
		e.MustFail(t, "lookup", "denied.test")
		own := "q" + strconv.FormatInt(time.Now().UnixNano(), 36) + ".denied.test"
		tunnel := "secret-" + own[:len(own)-len(".denied.test")] + ".tunnel.denied.test"
		e.MustFail(t, "lookup", own)
		e.MustFail(t, "txt", tunnel)
		require.Zero(t, e.Net.Queries(own), "a denied name reached the upstream DNS server")
		require.Zero(t, e.Net.Queries(tunnel), "a tunnelling query reached the upstream DNS server")
	})
	t.Run("direct connections to denied addresses", func(t *testing.T) {
		e.MustFail(t, "get", "http://"+denied+"/", "denied.test")
		// An allowed Host towards an address not resolved for it.
		e.MustFail(t, "get", "http://"+denied+"/", "allowed.test")
		// No name at all.
		e.MustFail(t, "get", "http://"+denied+"/", denied)
	})
	t.Run("SNI spoofing", func(t *testing.T) {
		e.MustFail(t, "tls", denied+":443", "allowed.test")
		e.MustReach(t, "hello from allowed.test", "tls", allowed+":443", "allowed.test")
	})
	t.Run("address rule", func(t *testing.T) {
		e.MustReach(t, "hello from other.test", "get", "http://"+other+"/", other)
		e.MustFail(t, "tls", other+":443", "other.test")
	})
	t.Run("UDP is dropped", func(t *testing.T) {
		e.MustFail(t, "udp", allowed+":7")
		e.MustFail(t, "udp", denied+":7")
	})
	t.Run("address rules cover UDP", func(t *testing.T) {
		e.MustReach(t, "ping", "udp", other+":7")
	})
	t.Run("denials are recorded", func(t *testing.T) {
		st, err := e.Ctl.EgressStatus(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, "deny", st.Policy.Default)
		var dns, tcp bool
		for _, d := range st.Denials {
			dns = dns || d.Proto == "dns" && strings.Contains(d.Dest+d.Name, "denied.test")
			tcp = tcp || d.Proto == "tcp" && d.Dest == denied && d.Port == 443 && d.Name == "allowed.test"
		}
		require.True(t, dns, "no dns denial of denied.test in %+v", st.Denials)
		require.True(t, tcp, "no tcp denial of the spoofed SNI in %+v", st.Denials)
		// Logged by the kernel, read by the enforcer: a moment later.
		deadline := time.Now().Add(5 * time.Second)
		for {
			if slices.ContainsFunc(st.Denials, func(d backend.EgressDenial) bool {
				return d.Proto == "udp" && d.Dest == denied && d.Port == 7
			}) {
				break
			}
			require.True(t, time.Now().Before(deadline), "no udp denial of %s:7 in %+v", denied, st.Denials)
			time.Sleep(50 * time.Millisecond)
			st, err = e.Ctl.EgressStatus(t.Context(), id)
			require.NoError(t, err)
		}
	})
	t.Run("root in the sandbox cannot get around it", func(t *testing.T) {
		// Refused for want of privilege (EPERM), or by a kernel that has
		// no such thing for the sandbox: gVisor's netlink takes no route
		// changes (EACCES) and has no netfilter family at all
		// (EPROTONOSUPPORT).
		refused := func(out string) {
			t.Helper()
			for _, why := range []string{"operation not permitted", "permission denied", "protocol not supported"} {
				if strings.Contains(out, why) {
					return
				}
			}
			t.Fatalf("%q: want a refusal (operation not permitted; under gVisor permission denied, protocol not supported)", out)
		}
		refused(e.MustFail(t, "route-del"))
		refused(e.MustFail(t, "route-add", "0.0.0.0/1", "10.252.0.1"))
		e.MustFail(t, "raw-udp", denied+":7")
		refused(e.MustFail(t, "nft-flush"))
		// The mark an in-namespace enforcer's own sockets carry (where the
		// sandbox may set it at all).
		e.MustFail(t, "mark-udp", allowed+":7", strconv.Itoa(egressctl.Mark))
		// Killing every process it can see leaves the enforcer alone.
		_, err := e.Sandbox.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"sh", "-c", "kill -9 -1; true"}})
		require.NoError(t, err)
		enforcerAlive(t)
		e.MustFail(t, "get", "http://"+denied+"/", "denied.test")
		e.MustReach(t, "hello from allowed.test", "get", "http://allowed.test/")
	})
	t.Run("a policy change applies to running connections", func(t *testing.T) {
		out := make(chan string, 1)
		var buf syncbuf.Buffer
		go func() {
			res, err := e.Sandbox.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"/netprobe", "stream", "http://allowed.test/stream", "allowed.test"}, Stdout: &buf})
			if err != nil {
				out <- err.Error()
				return
			}
			out <- "exit " + strconv.Itoa(res.ExitCode)
		}()
		// The stream is open once it sent a line.
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(buf.String(), "\n") {
			require.True(t, time.Now().Before(deadline), "the stream did not start: %q", buf.String())
			time.Sleep(20 * time.Millisecond)
		}
		changed := time.Now()
		require.NoError(t, e.Ctl.SetEgress(t.Context(), id, backend.Egress{Default: "deny", Allow: []string{"www.allowed.test"}}))
		select {
		case got := <-out:
			require.Equal(t, "exit 0", got)
			require.Contains(t, buf.String(), "cut:")
			t.Logf("the open connection was cut %v after the change", time.Since(changed).Round(time.Millisecond))
		case <-time.After(5 * time.Second):
			t.Fatal("the connection the new policy denies is still open after 5 s")
		}
		e.MustFail(t, "lookup", "allowed.test")
		e.MustFail(t, "get", "http://allowed.test/")
		e.MustFail(t, "udp", other+":7") // its address rule is gone
		e.MustReach(t, "hello from www.allowed.test", "get", "http://www.allowed.test/")
		st, err := e.Ctl.EgressStatus(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, []string{"www.allowed.test"}, st.Policy.Allow)
		// Bad rules are refused and change nothing.
		err = e.Ctl.SetEgress(t.Context(), id, backend.Egress{Allow: []string{"https://x.test"}})
		require.ErrorIs(t, err, backend.ErrInvalidConfig)
		require.Contains(t, err.Error(), "https://x.test")
		e.MustReach(t, "hello from www.allowed.test", "get", "http://www.allowed.test/")
	})
}

// CreateTimes times create to first exec of a sandbox of spec without a
// policy and one of withPolicy, alternating, once each per b.Loop
// (destroying each outside the timer), for the create overhead of a
// policy. settle, when not nil, runs before each create, outside the
// timer.
func CreateTimes(b *testing.B, create func(context.Context, backend.Spec) (backend.Sandbox, error), spec, withPolicy backend.Spec, settle func()) (plain, enforced []time.Duration) {
	ctx := context.Background()
	for b.Loop() {
		for _, s := range []backend.Spec{spec, withPolicy} {
			if settle != nil {
				b.StopTimer()
				settle()
				b.StartTimer()
			}
			start := time.Now()
			sb, err := create(ctx, s)
			if err != nil {
				b.Fatal(err)
			}
			if res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
				b.Fatal(err, res.ExitCode)
			}
			d := time.Since(start)
			if s.Egress == nil {
				plain = append(plain, d)
			} else {
				enforced = append(enforced, d)
			}
			b.StopTimer()
			if err := sb.Destroy(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	return plain, enforced
}

// HostService serves "HOST-SECRET" over HTTP on addr (an address of the
// machine the sandbox runs on, port 0) for t's life and returns where.
func HostService(t testing.TB, addr netip.Addr) string {
	t.Helper()
	l, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	require.NoError(t, err)
	return HostServiceOn(t, l)
}

// HostServiceIn is HostService in the network namespace ns (a name under
// /run/netns: a harness's remote host).
func HostServiceIn(t testing.TB, ns string, addr netip.Addr) string {
	t.Helper()
	var l net.Listener
	require.NoError(t, fakenet.InNamespace(ns, func() (err error) {
		l, err = net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		return err
	}))
	return HostServiceOn(t, l)
}

// HostServiceOn serves "HOST-SECRET" over HTTP on l for t's life.
func HostServiceOn(t testing.TB, l net.Listener) string {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "HOST-SECRET") })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// RunBoundary checks the boundary's edges from inside e (its policy is
// changed): services on the host's addresses hostServices (made with
// HostService) are out of reach under a default allow and through an
// allowed name; a denied name's address is refused whatever name a
// connection shows, for TCP and UDP; a connection no rule allows is
// refused at once, not after the client gave up waiting.
func RunBoundary(t *testing.T, e *Env, hostServices ...string) {
	denied := e.Net.Addr("denied.test").String()
	id := e.Sandbox.ID()
	set := func(t *testing.T, p backend.Egress) {
		t.Helper()
		require.NoError(t, e.Ctl.SetEgress(t.Context(), id, p))
	}
	t.Run("the host's services are out of reach", func(t *testing.T) {
		set(t, backend.Egress{Default: "allow"})
		for _, hs := range hostServices {
			out := e.MustFail(t, "get", "http://"+hs+"/", "allowed.test")
			require.NotContains(t, out, "HOST-SECRET")
		}
		// An address rule of a default-deny policy is the one way there.
		for _, hs := range hostServices {
			ap := netip.MustParseAddrPort(hs)
			set(t, backend.Egress{Default: "deny", Allow: []string{"allowed.test", ap.Addr().String() + ":" + strconv.Itoa(int(ap.Port()))}})
			e.MustReach(t, "HOST-SECRET", "get", "http://"+hs+"/", "allowed.test")
		}
	})
	t.Run("a denied name's address is denied whatever the name", func(t *testing.T) {
		set(t, backend.Egress{Default: "allow", Deny: []string{"denied.test"}})
		e.MustFail(t, "get", "http://"+denied+"/", "allowed.test")
		e.MustFail(t, "get", "http://"+denied+"/", denied)
		e.MustFail(t, "tls", denied+":443", "allowed.test")
		e.MustReach(t, "hello from allowed.test", "get", "http://allowed.test/")
		st, err := e.Ctl.EgressStatus(t.Context(), id)
		require.NoError(t, err)
		require.True(t, slices.ContainsFunc(st.Denials, func(d backend.EgressDenial) bool {
			return d.Proto == "tcp" && d.Dest == denied && strings.Contains(d.Reason, `resolved for "denied.test"`)
		}), "no denial of %s naming denied.test in %+v", denied, st.Denials)
		// Other protocols too, even where an address rule covers it.
		other := e.Net.Addr("other.test").String()
		set(t, backend.Egress{Default: "allow", Allow: []string{e.Net.Prefix.String() + ":7"}, Deny: []string{"denied.test"}})
		e.MustFail(t, "udp", denied+":7")
		e.MustReach(t, "ping", "udp", other+":7")
	})
	t.Run("refusals are at once", func(t *testing.T) {
		set(t, backend.Egress{Default: "deny", Allow: []string{"allowed.test"}})
		// The client sends nothing and waits 5 s for the server: a
		// refusal that drops or waits for its first bytes shows as a
		// timeout.
		out := e.MustFail(t, "wait", denied+":80")
		require.NotContains(t, out, "timeout", "a refused TCP connection made the client wait")
		out = e.MustFail(t, "udp", denied+":7")
		require.NotContains(t, out, "timeout", "a refused UDP datagram made the client wait")
		e.MustReach(t, "hello from allowed.test", "get", "http://allowed.test/")
	})
}

// TrustFakenet makes fn's CA this host's trust store for t's life
// ($SSL_CERT_FILE, a file every user may read: a lite enforcer reads it
// after dropping root), as the enforcers of brokered credentials verify
// the real servers with it.
func TrustFakenet(t testing.TB, fn *fakenet.Net) {
	t.Helper()
	f, err := os.CreateTemp("", "sbx-fakenet-ca-*.pem")
	require.NoError(t, err)
	t.Cleanup(func() { os.Remove(f.Name()) })
	_, err = f.Write(fn.CAPEM)
	require.NoError(t, err)
	require.NoError(t, f.Chmod(0o644))
	require.NoError(t, f.Close())
	t.Setenv("SSL_CERT_FILE", f.Name())
}

// RotateAndSee checks rotation of sb's credentials creds (their value
// from $SBX_TEST_BROKERED): a set that is not the sandbox's is refused,
// and after a rotation to value the server at allowed.test gets it within
// timeout.
func RotateAndSee(t *testing.T, rot backend.CredentialRotator, sb backend.Sandbox, creds []backend.Credential, e *Env, value string, timeout time.Duration) {
	t.Helper()
	require.ErrorIs(t, rot.RotateCredentials(t.Context(), sb.ID(), nil), backend.ErrInvalidConfig)
	t.Setenv("SBX_TEST_BROKERED", value)
	require.NoError(t, rot.RotateCredentials(t.Context(), sb.ID(), creds))
	require.Eventually(t, func() bool {
		_, ok := e.Probe(t, "get-verified", "https://allowed.test/header?name=X-Api-Key")
		got, _ := e.Net.Received("X-Api-Key")
		return ok && got == value
	}, timeout, 100*time.Millisecond, "the server never got the rotated value")
	e.MustBroker(t, value)
}

// MustBroker requires a request from the sandbox to allowed.test's
// /header?name=X-Api-Key (extra: more netprobe arguments, such as a header
// carrying the placeholder) to reach the server with value applied, and
// the server's echo of it to reach the sandbox masked: the sandbox's
// placeholder in its stead, never the value.
func (e *Env) MustBroker(t testing.TB, value string, extra ...string) {
	t.Helper()
	args := append([]string{"get-verified", "https://allowed.test/header?name=X-Api-Key"}, extra...)
	out, ok := e.Probe(t, args...)
	require.True(t, ok, "netprobe %v was refused: %s", args, out)
	require.NotContains(t, out, value, "the server's echo of the credential reached the sandbox")
	require.True(t, strings.HasPrefix(out, "header sbx-placeholder-"), "the echo is not masked by the placeholder: %q", out)
	got, _ := e.Net.Received("X-Api-Key")
	require.Equal(t, value, got, "what the server got")
}

// MustRecordBrokered requires the sandbox's egress status to record the
// requests to allowed.test's /header that carried credential name (GET,
// answered 200), and none of its records to hold value or the query.
func (e *Env) MustRecordBrokered(t testing.TB, name, value string) {
	t.Helper()
	st, err := e.Ctl.EgressStatus(t.Context(), e.Sandbox.ID())
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(st.Denials, func(d backend.EgressDenial) bool {
		return d.Kind == backend.EgressKindCredential && d.Method == "GET" && d.Path == "/header" && d.Status == 200 &&
			d.Name == "allowed.test" && strings.Contains(d.Reason, name)
	}), "no record of the requests that carried credential %s: %+v", name, st.Denials)
	data, err := json.Marshal(st)
	require.NoError(t, err)
	require.NotContains(t, string(data), value, "the egress status holds the value")
	require.NotContains(t, string(data), "name=X-Api-Key", "the egress status holds a query")
}
