package remotetest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// SSHD is an extra sshd in the harness's namespace, on a port of its own,
// that a test may stop (the harness's own sshd keeps serving the others).
type SSHD struct {
	Port int
	cmd  *exec.Cmd
	host *Host
	once sync.Once
}

// StartSSHD starts sshd with the harness's keys on port; it is stopped
// when t ends at the latest.
func (h *Host) StartSSHD(t testing.TB, port int) *SSHD {
	t.Helper()
	base, err := os.ReadFile(h.SSHDConfig)
	if err != nil {
		t.Fatal(err)
	}
	var conf bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(base))
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) > 0 && (strings.EqualFold(f[0], "ListenAddress") || strings.EqualFold(f[0], "PidFile")) {
			continue
		}
		conf.WriteString(line + "\n")
	}
	fmt.Fprintf(&conf, "ListenAddress %s\nPidFile none\n", net.JoinHostPort(h.Addr, strconv.Itoa(port)))
	path := filepath.Join(t.TempDir(), "sshd_config")
	if err := os.WriteFile(path, conf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	// -D: no daemon, so the process is this test's child and its
	// connections' processes are its children.
	cmd := h.InNetNS(context.Background(), "/usr/sbin/sshd", "-D", "-f", path, "-E", filepath.Join(filepath.Dir(path), "sshd.log"))
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting sshd: %v", err)
	}
	s := &SSHD{Port: port, cmd: cmd, host: h}
	t.Cleanup(s.Stop)
	addr := net.JoinHostPort(h.Addr, strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return s
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(filepath.Dir(path), "sshd.log"))
			t.Fatalf("sshd on %s did not come up: %v\n%s", addr, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop ends the listener and every connection it serves, as a crashed or
// stopped sshd would.
func (s *SSHD) Stop() {
	s.once.Do(func() {
		pid := s.cmd.Process.Pid
		kids := descendants(pid)
		s.cmd.Process.Signal(syscall.SIGTERM)
		for _, k := range kids {
			syscall.Kill(k, syscall.SIGKILL)
		}
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			s.cmd.Process.Kill()
			<-done
		}
	})
}

// descendants lists the PIDs below pid (from /proc/PID/task/*/children).
func descendants(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for field := range strings.FieldsSeq(string(data)) {
			if k, err := strconv.Atoi(field); err == nil {
				out = append(out, k)
				out = append(out, descendants(k)...)
			}
		}
	}
	return out
}

// Proxy forwards 127.0.0.1:PORT to a target, so a test can cut the
// connections going through it (as a network failure would).
type Proxy struct {
	Addr   string
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
	frozen atomic.Bool
}

// NewProxy listens on 127.0.0.1 and forwards to target; closed when t
// ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, 10*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); p.copy(up, c); up.Close() }()
		go func() { defer p.wg.Done(); p.copy(c, up); c.Close() }()
	}
}

// copy forwards src to dst, dropping what it reads while frozen.
func (p *Proxy) copy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Freeze makes the proxy drop every byte, as a link that died without a
// reset would (only keepalives can notice it).
func (p *Proxy) Freeze() { p.frozen.Store(true) }

// Thaw undoes Freeze for the connections that are still open and new ones.
func (p *Proxy) Thaw() { p.frozen.Store(false) }

// Cut resets every connection through the proxy (new ones still work) and
// returns how many it cut.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // RST, not FIN
		}
		c.Close()
		delete(p.conns, c)
		n++
	}
	return n / 2
}

// Close stops the proxy and cuts its connections.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
