// Command opensandbox-inprocess serves the in-process OpenSandbox server of
// package opensandboxtest on a loopback port, to try sbx or the env-gated
// tests against it:
//
//	go run ./backends/opensandbox/opensandboxtest/cmd/opensandbox-inprocess -addr 127.0.0.1:8080 -api-key secret
//
// It is NOT an OpenSandbox server: sandboxes are directories on this host
// and their commands run as host processes, with no isolation. Stop it with
// Ctrl-C; it removes its sandboxes.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandboxkit/sandboxkit/backends/opensandbox/opensandboxtest"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on (loopback only: commands run on this host)")
	key := flag.String("api-key", "", "API key clients must send (empty: none)")
	flag.Parse()
	srv, err := opensandboxtest.NewServer(opensandboxtest.Options{Addr: *addr, APIKey: *key})
	if err != nil {
		fmt.Fprintln(os.Stderr, "opensandbox-inprocess:", err)
		os.Exit(1)
	}
	fmt.Printf("OPEN_SANDBOX_DOMAIN=%s\n", srv.Domain())
	fmt.Println("in-process OpenSandbox server (host processes, no isolation); Ctrl-C to stop")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	srv.Close()
}
