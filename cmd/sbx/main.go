// Command sbx makes and uses sandboxes from a sandboxkit config: run a
// command in a fresh sandbox (sbx run), keep sandboxes up, exec in them, copy
// files, use the agent tools, and reap what was left behind (sbx gc).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// The first SIGINT or SIGTERM cancels the context: the running command is
	// killed and its sandbox removed. Handling then stops, so a second one
	// ends sbx at once (sbx gc reaps what that leaves).
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		signal.Stop(sigs)
		cancel(interrupted{s})
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// interrupted is the cancel cause when a signal arrived.
type interrupted struct{ sig os.Signal }

func (e interrupted) Error() string { return e.sig.String() + " received" }
