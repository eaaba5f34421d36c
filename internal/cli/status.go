package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/session"
)

func (a *app) statusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status [SESSION-ID]",
		Short: "List sessions, or show one session's sandboxes and endpoints",
		Long: `Without an ID, status lists the sessions on the backend: each with its
sandboxes and their states (ready sessions of pools are left out: see
sbx pool status). With an ID, it reattaches to the session (as a
restarted program would, with sandboxkit.Resume) and prints its sandboxes and
endpoints; a session with a sandbox removed behind its back is reported, with
what is left.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError(cmd, "want at most one session ID, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				return a.statusOne(cmd.Context(), args[0])
			}
			return a.statusAll(cmd.Context())
		},
	}
}

type sessionRow struct {
	Session   string            `json:"session"`
	Sandboxes map[string]string `json:"sandboxes"` // name -> state
	Created   time.Time         `json:"created"`
	// Launch is session.LaunchStateOf: launched, launching, abandoned
	// (its sbx up was killed: incomplete, gc removes it) or unknown.
	Launch  session.LaunchState `json:"launch"`
	members []backend.Info
}

func (a *app) statusAll(ctx context.Context) error {
	_, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	infos, err := b.List(ctx, backend.Filter{})
	if err != nil {
		return err
	}
	bySession := map[string]*sessionRow{}
	for _, info := range infos {
		if info.Session == "" || info.Labels[session.LabelMembers] == "" {
			continue // not a launched session (sbx run, or a lone sandbox)
		}
		if st := info.Labels[backend.LabelPoolState]; st == backend.PoolReady || st == backend.PoolMaking {
			continue // a ready session of a pool (sbx pool status)
		}
		r := bySession[info.Session]
		if r == nil {
			r = &sessionRow{Session: info.Session, Sandboxes: map[string]string{}, Created: info.CreatedAt}
			bySession[info.Session] = r
			for _, n := range strings.Split(info.Labels[session.LabelMembers], ",") {
				r.Sandboxes[n] = "missing"
			}
		}
		r.Sandboxes[info.Name] = string(info.State)
		r.members = append(r.members, info)
		if info.CreatedAt.Before(r.Created) {
			r.Created = info.CreatedAt
		}
	}
	rows := slices.Collect(maps.Values(bySession))
	for _, r := range rows {
		if r.Launch, err = session.LaunchStateOf(ctx, b, r.Session, r.members); err != nil {
			return err
		}
	}
	slices.SortFunc(rows, func(x, y *sessionRow) int { return x.Created.Compare(y.Created) })
	if a.json {
		if rows == nil {
			rows = []*sessionRow{}
		}
		return printJSON(a.stdout, rows)
	}
	t := newTable(a.stdout, "SESSION", "LAUNCH", "SANDBOXES", "CREATED")
	now := time.Now()
	for _, r := range rows {
		var parts []string
		for _, n := range slices.Sorted(maps.Keys(r.Sandboxes)) {
			parts = append(parts, n+"("+r.Sandboxes[n]+")")
		}
		launch := string(r.Launch)
		if r.Launch == session.Abandoned {
			launch = "incomplete (its sbx up was stopped; sbx gc removes it)"
		}
		t.row(r.Session, launch, strings.Join(parts, " "), shortDuration(now.Sub(r.Created))+" ago")
	}
	return t.flush()
}

func (a *app) statusOne(ctx context.Context, id string) error {
	cfg, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	s, err := (&session.Launcher{Config: cfg, Backend: b, Logger: a.logger}).Resume(ctx, id)
	if err != nil {
		// Show what is left, then the reason.
		infos, lerr := b.List(ctx, backend.Filter{Session: id})
		if lerr == nil && len(infos) > 0 && !a.json {
			t := newTable(a.stdout, "NAME", "ID", "STATE")
			for _, info := range infos {
				t.row(info.Name, info.ID, string(info.State))
			}
			t.flush()
		}
		return fmt.Errorf("%w (sbx down %s removes what is left)", err, id)
	}
	defer s.Close()
	res, err := describeSession(ctx, s)
	if err != nil {
		return err
	}
	return a.printSession(res)
}
