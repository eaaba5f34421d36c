package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
)

func (a *app) upCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "up [NAME...]",
		Short: "Make sandboxes from config entries and leave them running",
		Long: `Up makes one sandbox for each named config entry (default: every entry),
concurrently, and prints their IDs. They have no owner and outlive sbx: remove
them with sbx rm, or let their TTL expire and sbx gc reap them. If one cannot
be made, the others are removed again.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.up(cmd.Context(), args)
		},
	}
}

type upResult struct {
	Name  string        `json:"name"`
	ID    string        `json:"id"`
	State backend.State `json:"state"`
}

func (a *app) up(ctx context.Context, names []string) error {
	cfg, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	if len(names) == 0 {
		names = cfg.SandboxNames()
		if len(names) == 0 {
			return errors.New("config has no sandbox entries")
		}
	}
	// Check every entry before making anything.
	specs := make([]backend.Spec, len(names))
	for i, name := range names {
		if specs[i], err = cfg.Spec(name); err != nil {
			return err
		}
	}

	// One display for the parallel pulls and builds.
	sink, err := newProgress(a.progress, a.stderr)
	if err != nil {
		return err
	}
	made := make([]backend.Sandbox, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i := range names {
		wg.Go(func() {
			made[i], errs[i] = b.Create(ctx, withProgress(specs[i], sink))
			if errs[i] != nil {
				errs[i] = fmt.Errorf("sandbox %q: %w", names[i], errs[i])
			}
		})
	}
	wg.Wait()
	sink.close()
	if err := errors.Join(errs...); err != nil {
		for i, sb := range made {
			if sb == nil {
				continue
			}
			if derr := destroy(ctx, sb); derr != nil {
				err = errors.Join(err, fmt.Errorf("removing sandbox %q (%s): %w", names[i], sb.ID(), derr))
			}
		}
		return err
	}

	results := make([]upResult, len(names))
	for i, sb := range made {
		results[i] = upResult{Name: names[i], ID: sb.ID(), State: backend.StateUnknown}
		if info, err := sb.Info(ctx); err == nil {
			results[i].State = info.State
		}
	}
	if a.json {
		return printJSON(a.stdout, results)
	}
	t := newTable(a.stdout, "NAME", "ID", "STATE")
	for _, r := range results {
		t.row(r.Name, r.ID, string(r.State))
	}
	return t.flush()
}
