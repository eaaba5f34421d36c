package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/owner"
)

func (a *app) gcCmd() *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove expired sandboxes and those whose owner is gone",
		Long: `Gc removes every sandbox of the backend whose TTL has run out, and every
sandbox owned by a process that no longer runs (an sbx run that was killed
before it could clean up). Sandboxes owned by processes on other hosts are
left to their TTL.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.gc(cmd.Context(), dryRun)
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only print what would be removed")
	return cmd
}

type gcResult struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Reason  string `json:"reason"`
	Removed bool   `json:"removed"`
	Error   string `json:"error,omitempty"`
}

func (a *app) gc(ctx context.Context, dryRun bool) error {
	_, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	infos, err := b.List(ctx, backend.Filter{})
	if err != nil {
		return err
	}
	now := time.Now()
	results := []gcResult{}
	failed := false
	for _, info := range infos {
		reason := reapReason(info, now)
		if reason == "" {
			continue
		}
		r := gcResult{ID: info.ID, Name: info.Name, Reason: reason}
		if !dryRun {
			err := reap(ctx, b, info.ID)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				r.Error = err.Error()
				failed = true
				a.printError(fmt.Errorf("removing %s: %w", info.ID, err))
			} else {
				r.Removed = true
			}
		}
		results = append(results, r)
		if !a.json && r.Error == "" {
			verb := "removed"
			if dryRun {
				verb = "would remove"
			}
			fmt.Fprintf(a.stdout, "%s %s (%s): %s\n", verb, r.ID, orDash(r.Name), r.Reason)
		}
	}
	if a.json {
		if err := printJSON(a.stdout, results); err != nil {
			return err
		}
	}
	if failed {
		return &exitCode{exitError}
	}
	return nil
}

// reapReason says why gc removes a sandbox, or "" to keep it.
func reapReason(info backend.Info, now time.Time) string {
	if info.Expired(now) {
		return "expired " + shortDuration(now.Sub(info.ExpiresAt)) + " ago"
	}
	if info.Owner == "" {
		return ""
	}
	if alive, known := owner.Alive(info.Owner); known && !alive {
		return "owner " + info.Owner + " is gone"
	}
	return ""
}

func reap(ctx context.Context, b backend.Backend, id string) error {
	sb, err := b.Get(ctx, id)
	if errors.Is(err, backend.ErrNotFound) {
		return nil // removed meanwhile
	}
	if err != nil {
		return err
	}
	return sb.Destroy(ctx)
}
