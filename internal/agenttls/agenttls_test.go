package agenttls

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func listen(t *testing.T, c *Creds) net.Listener {
	t.Helper()
	l, err := Listen("127.0.0.1:0", c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	// An echo server of what follows the token.
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(conn, conn); conn.Close() }()
		}
	}()
	return l
}

func newCreds(t *testing.T) *Creds {
	t.Helper()
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	// What the agent gets is the line.
	back, err := Parse(c.Line())
	if err != nil {
		t.Fatal(err)
	}
	if back.Token != c.Token || string(back.CertPEM) != string(c.CertPEM) || string(back.KeyPEM) != string(c.KeyPEM) {
		t.Fatal("Parse(Line()) differs")
	}
	return back
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// The right client gets through, and what it sends right after the token
// arrives whole.
func TestDialAndListen(t *testing.T) {
	c := newCreds(t)
	l := listen(t, c)
	conn, err := Dial(ctx(t), l.Addr().String(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msg := strings.Repeat("payload ", 10000)
	go conn.Write([]byte(msg))
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != msg {
		t.Fatalf("echo: %v (%d bytes right)", err, len(got))
	}
}

// A client with another sandbox's token, or none, is cut off; a client
// pinning another certificate refuses the agent.
func TestRefusals(t *testing.T) {
	old := tokenTimeout
	tokenTimeout = time.Second
	t.Cleanup(func() { tokenTimeout = old })
	c, other := newCreds(t), newCreds(t)
	l := listen(t, c)
	addr := l.Addr().String()

	wrongToken := *c
	wrongToken.Token = other.Token
	conn, err := Dial(ctx(t), addr, &wrongToken)
	if err == nil {
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		conn.Write([]byte("hello"))
		if n, rerr := conn.Read(make([]byte, 5)); rerr == nil {
			t.Errorf("a wrong token was served (%d bytes back)", n)
		}
		conn.Close()
	}

	// The agent's certificate is not the one this client pins.
	if conn, err := Dial(ctx(t), addr, other); err == nil {
		conn.Close()
		t.Error("a client accepted an agent whose certificate it does not pin")
	}

	// Plain TLS, no token: nothing comes back, the connection closes.
	tc, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err == nil {
		tc.SetReadDeadline(time.Now().Add(15 * time.Second))
		if _, err := tc.Read(make([]byte, 1)); err == nil {
			t.Error("a connection without a token got data")
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Error("a connection without a token was not closed within the token timeout")
		}
		tc.Close()
	}
}

func TestParseRefusesBadLines(t *testing.T) {
	c := newCreds(t)
	for _, line := range []string{"", "sbxd-tls1", "sbxd-tls0 " + strings.TrimPrefix(c.Line(), "sbxd-tls1 "),
		"sbxd-tls1 short " + strings.Join(strings.Fields(c.Line())[2:], " "),
		"sbxd-tls1 " + c.Token + " !!! ???"} {
		if _, err := Parse(line); err == nil {
			t.Errorf("Parse(%.40q) succeeded", line)
		}
	}
}

func FuzzParse(f *testing.F) {
	c, err := New()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(c.Line())
	f.Add("sbxd-tls1 x y z")
	f.Fuzz(func(t *testing.T, line string) {
		got, err := Parse(line)
		if err != nil {
			return
		}
		if back, err := Parse(got.Line()); err != nil || back.Token != got.Token {
			t.Fatalf("a parsed line does not round-trip: %v", err)
		}
	})
}
