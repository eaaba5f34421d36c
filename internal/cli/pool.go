package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/internal/owner"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
	"github.com/sandboxkit/sandboxkit/session"
)

// EnvPoolDir overrides where keepers record their figures (default
// ~/.cache/sandboxkit/pools).
const EnvPoolDir = "SBX_POOL_DIR"

func (a *app) poolCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pool",
		Short: "Keep warm pools of ready sandboxes, and show them",
		Long: `A config entry with a [sandbox.sandboxes.NAME.pool] table has a warm pool:
ready sandboxes that sbx run, sbx up and sbx serve's create_sandbox claim in
milliseconds instead of making one. A keeper keeps the pool full: sbx serve
keeps the pools of the entries it serves; from the command line,
sbx pool keep runs one in the foreground (run it under your service manager,
or in the background with &). Without a keeper a pool is empty and sandboxes
are made when asked for, as without the table.

Ready sandboxes belong to their keeper: when it stops they are removed, and
when it is killed sbx gc removes them once they are older than --grace.`,
	}
	cmd.AddCommand(a.poolKeepCmd(), a.poolStatusCmd(), a.poolStopCmd())
	return cmd
}

func (a *app) poolKeepCmd() *cobra.Command {
	var sessions bool
	cmd := &cobra.Command{
		Use:   "keep [ENTRY...]",
		Short: "Keep the pools of the config's entries full until stopped",
		Long: `Keep runs a keeper in the foreground for the named entries (default: every
entry with a [pool] table): it makes ready sandboxes until each pool has its
size, replaces those older than max_idle, and makes new ones as tasks claim
them. Ctrl-C, SIGTERM or sbx pool stop end it; it then removes the ready
sandboxes it made.

sbx run and sbx serve claim ready sandboxes. sbx up NAME claims a ready
session of NAME alone instead (a sandbox with the session's own /shared,
/bash_tools, /sandbox_scripts and network): --sessions keeps those.`,
		Example: `  sbx pool keep
  sbx pool keep main &
  sbx pool keep --sessions main &     # for sbx up main
  sbx pool status`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.poolKeep(cmd.Context(), args, sessions)
		},
	}
	cmd.Flags().BoolVar(&sessions, "sessions", false, "keep ready sessions of one entry (for sbx up NAME) instead of ready sandboxes (for sbx run and sbx serve)")
	return cmd
}

func (a *app) poolStatusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status [ENTRY...]",
		Short: "Show the pools: ready and claimed sandboxes, keepers and their figures",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.poolStatus(cmd.Context(), args)
		},
	}
}

func (a *app) poolStopCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "stop [ENTRY...]",
		Short: "Stop the keepers of the config's pools (they remove their ready sandboxes)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.poolStop(cmd.Context(), args)
		},
	}
}

// pooledEntries returns the named entries (default: all with a pool),
// refusing a named entry without one.
func pooledEntries(cfg *config.Config, names []string) ([]string, error) {
	if len(names) == 0 {
		for _, n := range cfg.SandboxNames() {
			if e, _ := cfg.Entry(n); e != nil && e.Pool != nil {
				names = append(names, n)
			}
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("%s: no entry has a [sandbox.sandboxes.NAME.pool] table (add one with size = N)", cfg.Describe())
		}
		return names, nil
	}
	for _, n := range names {
		e, err := cfg.Entry(n)
		if err != nil {
			return nil, err
		}
		if e.Pool == nil {
			return nil, fmt.Errorf("%s: entry %q has no [sandbox.sandboxes.%s.pool] table", cfg.Describe(), n, n)
		}
	}
	return names, nil
}

// keeperRecord is what a keeper writes to the pool dir while it runs.
type keeperRecord struct {
	Keeper  string              `json:"keeper"` // owner string
	PID     int                 `json:"pid"`
	Config  string              `json:"config"`
	Updated time.Time           `json:"updated"`
	Pools   []session.PoolStats `json:"pools"`
}

func poolDir() (string, error) {
	if d := os.Getenv(EnvPoolDir); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no folder for the keepers' records ($%s unset and %w)", EnvPoolDir, err)
	}
	return filepath.Join(d, "sandboxkit", "pools"), nil
}

func (a *app) poolKeep(ctx context.Context, names []string, sessions bool) error {
	cfg, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	names, err = pooledEntries(cfg, names)
	if err != nil {
		return err
	}
	l := &session.Launcher{Config: cfg, Logger: a.logger}
	var pools []*session.Pool
	for _, n := range names {
		newPool := func() (*session.Pool, error) { return l.NewPool(b, n, nil) }
		if sessions {
			newPool = func() (*session.Pool, error) { return l.NewSessionPool(b, n) }
		}
		p, err := newPool()
		if err != nil {
			return err
		}
		pools = append(pools, p)
	}
	dir, err := poolDir()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	rec := filepath.Join(dir, fmt.Sprintf("keeper-%d.json", os.Getpid()))
	defer os.Remove(rec)

	var wg sync.WaitGroup
	for _, p := range pools {
		wg.Go(func() { p.Keep(ctx) })
		s := p.Settings()
		kind := "sandboxes"
		if sessions {
			kind = "sessions"
		}
		fmt.Fprintf(a.stderr, "keeping pool %s (%s: %d ready %s, max_idle %s, reuse %v) on %s\n",
			p.Name(), p.Key(), s.Size, kind, s.MaxIdle, p.Reuses(), b.Name())
	}
	write := func() {
		r := keeperRecord{Keeper: owner.Self(), PID: os.Getpid(), Config: cfg.Describe(), Updated: time.Now().UTC()}
		for _, p := range pools {
			r.Pools = append(r.Pools, p.Stats())
		}
		data, _ := json.MarshalIndent(r, "", "  ")
		if err := statedir.WriteFileAtomic(rec, data); err != nil {
			a.logger.Warn("writing the keeper's record", "path", rec, "err", err)
		}
	}
	write()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			write()
		}
	}
	fmt.Fprintln(a.stderr, "stopping: removing the ready sandboxes")
	wg.Wait()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	for _, p := range pools {
		if err := p.Close(cctx); err != nil {
			return err
		}
	}
	return nil // stopping is how a keeper ends
}

// liveKeepers reads the records of keepers that still run.
func liveKeepers() ([]keeperRecord, error) {
	dir, err := poolDir()
	if err != nil {
		return nil, err
	}
	paths, _ := filepath.Glob(filepath.Join(dir, "keeper-*.json"))
	var out []keeperRecord
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var r keeperRecord
		if json.Unmarshal(data, &r) != nil {
			continue
		}
		if alive, known := owner.Alive(r.Keeper); known && !alive {
			os.Remove(p) // a killed keeper's
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// poolStatusJSON is one pool in sbx pool status --json.
type poolStatusJSON struct {
	Entry string `json:"entry"`
	// Kind is "sandbox" (for sbx run and sbx serve) or "session" (for sbx up).
	Kind    string `json:"kind"`
	Pool    string `json:"pool"`
	Backend string `json:"backend"`
	Size    int    `json:"size"`
	// Ready, Making and Claimed count the members the backend lists;
	// OldestAge is the oldest ready member's age in seconds.
	Ready     int     `json:"ready"`
	Claimed   int     `json:"claimed"`
	OldestAge float64 `json:"oldest_ready_age_sec"`
	// Keepers are the figures of the keepers on this host.
	Keepers []keeperPoolJSON `json:"keepers"`
}

type keeperPoolJSON struct {
	Keeper string `json:"keeper"`
	PID    int    `json:"pid"`
	session.PoolStats
}

// poolTargets returns the named pooled entries (see pooledEntries) and the
// keepers of this host that run.
func poolTargets(cfg *config.Config, names []string) ([]string, []keeperRecord, error) {
	names, err := pooledEntries(cfg, names)
	if err != nil {
		return nil, nil, err
	}
	keepers, err := liveKeepers()
	return names, keepers, err
}

func (a *app) poolStatus(ctx context.Context, names []string) error {
	cfg, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	names, keepers, err := poolTargets(cfg, names)
	if err != nil {
		return err
	}
	l := &session.Launcher{Config: cfg}
	now := time.Now()
	var out []poolStatusJSON
	for _, n := range names {
		spec, _, err := l.Standalone(n)
		if err != nil {
			return err
		}
		e, _ := cfg.Entry(n)
		for _, kind := range []string{"sandbox", "session"} {
			key := session.PoolKey(n, spec)
			if kind == "session" {
				key = session.SessionPoolKey(n, spec)
			}
			st := poolStatusJSON{Entry: n, Kind: kind, Pool: key, Backend: b.Name(), Size: e.PoolSettings().Size, Keepers: []keeperPoolJSON{}}
			infos, err := b.List(ctx, backend.Filter{Name: n, Labels: map[string]string{backend.LabelPool: st.Pool}})
			if err != nil {
				return err
			}
			for _, i := range infos {
				switch i.Labels[backend.LabelPoolState] {
				case backend.PoolReady:
					st.Ready++
					st.OldestAge = max(st.OldestAge, now.Sub(i.CreatedAt).Seconds())
				case backend.PoolClaimed:
					st.Claimed++
				}
			}
			for _, k := range keepers {
				for _, ps := range k.Pools {
					if ps.Pool == st.Pool {
						st.Keepers = append(st.Keepers, keeperPoolJSON{Keeper: k.Keeper, PID: k.PID, PoolStats: ps})
					}
				}
			}
			if kind == "sandbox" || len(infos) > 0 || len(st.Keepers) > 0 {
				out = append(out, st)
			}
		}
	}
	if a.json {
		return printJSON(a.stdout, out)
	}
	t := newTable(a.stdout, "ENTRY", "KIND", "POOL", "SIZE", "READY", "CLAIMED", "OLDEST", "KEEPERS", "SERVED", "COLD", "REFILL/MIN")
	for _, s := range out {
		var served, cold int64
		refill := 0
		var pids []string
		for _, k := range s.Keepers {
			served += k.Claimed
			cold += k.ColdFallbacks
			refill += k.RefillPerMinute
			pids = append(pids, fmt.Sprint(k.PID))
		}
		oldest := "-"
		if s.Ready > 0 {
			oldest = shortDuration(time.Duration(s.OldestAge * float64(time.Second)))
		}
		t.row(s.Entry, s.Kind, s.Pool, fmt.Sprint(s.Size), fmt.Sprint(s.Ready), fmt.Sprint(s.Claimed), oldest,
			cmp.Or(strings.Join(pids, ","), "none"), fmt.Sprint(served), fmt.Sprint(cold), fmt.Sprint(refill))
	}
	return t.flush()
}

func (a *app) poolStop(ctx context.Context, names []string) error {
	cfg, err := a.loadConfig(a.configPath)
	if err != nil {
		return err
	}
	names, keepers, err := poolTargets(cfg, names)
	if err != nil {
		return err
	}
	l := &session.Launcher{Config: cfg}
	keys := map[string]bool{}
	for _, n := range names {
		spec, _, err := l.Standalone(n)
		if err != nil {
			return err
		}
		keys[session.PoolKey(n, spec)] = true
		keys[session.SessionPoolKey(n, spec)] = true
	}
	stopped := 0
	for _, k := range keepers {
		if !slices.ContainsFunc(k.Pools, func(p session.PoolStats) bool { return keys[p.Pool] }) {
			continue
		}
		if err := syscall.Kill(k.PID, syscall.SIGTERM); err != nil {
			a.printError(fmt.Errorf("stopping keeper %d: %w", k.PID, err))
			continue
		}
		fmt.Fprintf(a.stderr, "stopping keeper %d\n", k.PID)
		for {
			if alive, _ := owner.Alive(k.Keeper); !alive {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		stopped++
	}
	if stopped == 0 {
		fmt.Fprintln(a.stderr, "no keeper of these pools runs on this host")
	}
	return nil
}
