package backendtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// serveScript is a main command that serves one page over HTTP: it writes
// its second argument to bt-www/index.html under its working directory and
// serves that folder on the port in its first argument, with busybox's
// httpd or python3, whichever the sandbox has.
const serveScript = `mkdir -p bt-www && printf '%s\n' "$2" > bt-www/index.html && cd bt-www || exit 1
if command -v busybox >/dev/null 2>&1 && busybox --list 2>/dev/null | grep -qx httpd; then
	exec busybox httpd -f -p "$1"
fi
if command -v python3 >/dev/null 2>&1; then
	exec python3 -m http.server "$1"
fi
echo "backendtest: no HTTP server in the sandbox (busybox httpd or python3)" >&2
exit 127`

// serveCommand is a Spec.Command serving body (and a newline) at "/" on
// port.
func serveCommand(port int, body string) []string {
	return []string{"sh", "-c", serveScript, "sh", strconv.Itoa(port), body}
}

// fetchScript sends GET / over HTTP/1.0 to the host and port in its
// arguments and prints the raw response, with python3 or nc, whichever the
// sandbox has. (busybox-static's wget crashes in Debian's build, so no
// HTTP client of the sandbox's is used; the caller parses the response.)
const fetchScript = `if command -v python3 >/dev/null 2>&1; then
	exec python3 -c 'import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
s.sendall(("GET / HTTP/1.0\r\nHost: %s\r\n\r\n" % sys.argv[1]).encode())
while True:
    b = s.recv(65536)
    if not b:
        break
    sys.stdout.buffer.write(b)' "$1" "$2"
fi
if command -v nc >/dev/null 2>&1; then
	printf 'GET / HTTP/1.0\r\nHost: %s\r\n\r\n' "$1" | nc -w 5 "$1" "$2"
	exit
fi
echo "backendtest: no TCP client in the sandbox (python3 or nc)" >&2
exit 127`

// fetchCommand is an ExecRequest.Cmd printing the raw response to GET /
// from host:port.
func fetchCommand(host string, port int) []string {
	return []string{"sh", "-c", fetchScript, "sh", host, strconv.Itoa(port)}
}

// responseBody returns the body of a raw HTTP response, or an error when
// it is not a whole 200 response.
func responseBody(raw []byte) (string, error) {
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	if err != nil {
		return "", fmt.Errorf("not an HTTP response: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("%s", resp.Status)
	}
	return string(body), nil
}

// readyTimeout bounds how long a case waits for a server it started in a
// sandbox to answer: the sandbox may still be pulling a tool or starting
// its interpreter, and forwards (k8s, SSH) take a moment.
const readyTimeout = time.Minute

// poll calls try at growing intervals until it returns true or d has
// passed, and reports whether it did.
func poll(d time.Duration, try func() bool) bool {
	deadline := time.Now().Add(d)
	for delay := 20 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		if try() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(delay)
	}
}

// freePort returns a TCP port that is free on this machine now: a server
// in a sandbox on the host's network can listen on it, and in a sandbox
// with a network of its own it is as good as any.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// httpGet returns the body of http://addr/.
func httpGet(ctx context.Context, addr string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return "", err
	}
	// A fresh connection each time: a forward that was not ready must
	// not be reused.
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("%s", resp.Status)
	}
	return string(body), nil
}
