package lite

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/internal/atomicfile"
	"github.com/sandboxkit/sandboxkit/internal/owner"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

var _ backend.Forker = (*Sandbox)(nil)

// Fork makes req.N sandboxes from this one's files: each gets a copy of
// its upper layer over the same image, and runs its OCI config (command,
// environment, limits, volumes) in new namespaces and a cgroup of its
// own. The copies are reflinks where the file system shares blocks
// copy-on-write (FICLONE: btrfs, XFS), else real copies; no fork shares a
// writable file with another or with the parent. A running parent is
// paused while the first copy is made; the others are copied from that
// one before it runs. Processes are not carried over (see
// backend.Forker).
//
// A fork of one (N = 1) starts a container made ahead for it where the
// sandbox has one, with the layer laid over it instead of copied; one is
// made in the background after every fork (see forkstandby.go).
//
// Until Fork returns them, the forks are this process's: each record
// names it as the creator, complete forks too, and the marks are cleared
// together, in one step (statedir.HandOver), just before Fork returns. A
// Fork killed before that step leaves forks that List shows as being
// created by a process that is gone, which sbx gc removes; one killed
// after it leaves complete forks, which sbx ls shows and sbx gc keeps.
func (s *Sandbox) Fork(ctx context.Context, req backend.ForkRequest) ([]backend.Sandbox, error) {
	plans, err := s.makeForks(ctx, req)
	if err == nil {
		ids := make([]string, len(plans))
		for i, p := range plans {
			ids[i] = p.sb.id
		}
		if err = req.TellMade(ids); err == nil {
			err = s.b.handOver(plans)
		}
		if err != nil {
			s.dropForks(ctx, plans)
		}
	}
	if err != nil {
		return nil, s.opErr("fork", err)
	}
	if !s.b.noForkStandby {
		s.b.background(s.prepareForkStandby)
	}
	out := make([]backend.Sandbox, len(plans))
	for i, p := range plans {
		out[i] = p.sb
	}
	return out, nil
}

// handOver clears the creator of the forks of plans: from then on they
// are the caller's (see Fork).
func (b *Backend) handOver(plans []*forkPlan) error {
	ids := make([]string, len(plans))
	for i, p := range plans {
		ids[i] = p.m.ID
	}
	if err := statedir.HandOver[meta](b.dir, plans[0].m.Batch, ids); err != nil {
		return err
	}
	for _, p := range plans {
		p.m.Creator, p.m.Batch = "", ""
	}
	return nil
}

// forkPlan is one fork being made.
type forkPlan struct {
	sb *Sandbox
	m  *meta
	// standby: its container is made, waiting to start (see
	// forkstandby.go).
	standby bool
}

// makeForks makes and starts the forks req asks for, each still recorded
// as being created by this process; on failure it removes those it made.
func (s *Sandbox) makeForks(ctx context.Context, req backend.ForkRequest) (_ []*forkPlan, err error) {
	if req.N < 1 {
		return nil, fmt.Errorf("%w: fork: n must be at least 1, got %d", backend.ErrInvalidConfig, req.N)
	}
	if req.TTL < 0 {
		return nil, fmt.Errorf("%w: fork: ttl must not be negative, got %s", backend.ErrInvalidConfig, req.TTL)
	}
	// Forks of n > 1 are handed over together (statedir.HandOver).
	batch := ""
	if req.N > 1 {
		if batch, err = statedir.NewBatch(); err != nil {
			return nil, err
		}
	}
	plans := make([]*forkPlan, req.N)
	defer func() {
		if err != nil {
			s.dropForks(ctx, plans)
		}
	}()
	parent, cfg, thawed, err := s.forkFirst(ctx, req, batch, plans)
	defer thawed()
	if err != nil {
		return nil, err
	}
	// The rest copy the first fork's layer, before anything runs on it:
	// a running fork writes there.
	first := upperDir(plans[0].sb.dir, 0)
	errs := make([]error, req.N)
	var wg sync.WaitGroup
	for i := 1; i < req.N; i++ {
		wg.Go(func() { plans[i], errs[i] = s.b.prepareFork(s, parent, cfg, req, batch, first, nil) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for i, p := range plans {
		wg.Go(func() { errs[i] = s.b.startFork(ctx, p) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return plans, nil
}

// forkFirst copies the parent's layer for the first fork, under the
// parent's lock and with the parent paused, and returns the parent's
// record and OCI config. The parent is thawed and its lock let go while
// the caller goes on; thawed waits for that, and the caller calls it
// before it returns, error or not.
func (s *Sandbox) forkFirst(ctx context.Context, req backend.ForkRequest, batch string, plans []*forkPlan) (_ *meta, _ *specs.Spec, thawed func(), err error) {
	unlock := s.lock()
	resume := func() {}
	done := make(chan struct{})
	defer func() {
		go func() {
			resume()
			unlock()
			close(done)
		}()
	}()
	thawed = func() { <-done }
	m, err := s.meta()
	if err != nil {
		return nil, nil, thawed, err
	}
	if m.Creator != "" || m.Removing {
		return nil, nil, thawed, fmt.Errorf("%w: the sandbox is being created or removed", backend.ErrUnavailable)
	}
	cfg, err := readConfig(bundleDir(s.dir, m.Gen))
	if err != nil {
		return nil, nil, thawed, err
	}
	quiesce := func() error {
		r, err := s.freeze(ctx, m)
		if err == nil {
			resume = r
		}
		return err
	}
	if req.N == 1 {
		if p := s.takeForkStandby(m, req); p != nil {
			if err := quiesce(); err != nil {
				s.b.background(func() { s.dropStandby(ctx, p.sb) })
				return nil, nil, thawed, err
			}
			quiesce = nil // frozen already
			err := s.mergeInto(m, p)
			if err == nil {
				plans[0] = p
				return m, cfg, thawed, nil
			}
			s.b.log.Debug("forking without the container made ahead", "sandbox", s.id, "err", err)
			s.b.background(func() { s.dropStandby(ctx, p.sb) })
		}
	}
	plans[0], err = s.b.prepareFork(s, m, cfg, req, batch, upperDir(s.dir, m.Gen), quiesce)
	return m, cfg, thawed, err
}

// prepareFork records a new sandbox like parent (whose record is pm and
// OCI config cfg), writes its bundle and copies the layer at upper as its
// writable layer: after quiesce, where there is one, has made upper hold
// still. The bundle is written meanwhile. Nothing is mounted or started.
func (b *Backend) prepareFork(parent *Sandbox, pm *meta, cfg *specs.Spec, req backend.ForkRequest, batch, upper string, quiesce func() error) (*forkPlan, error) {
	p, err := b.recordFork(pm, req, "", batch)
	if err != nil {
		return p, err
	}
	dir := p.sb.dir
	bundle := make(chan error, 1)
	go func() { bundle <- b.writeForkBundle(p, cfg, parent, false) }()
	err = func() error {
		if quiesce != nil {
			if err := quiesce(); err != nil {
				return err
			}
		}
		if err := copyTree(upper, upperDir(dir, 0), cloneFiles); err != nil {
			return fmt.Errorf("copying the sandbox's layer: %w", err)
		}
		return nil
	}()
	return p, errors.Join(err, <-bundle)
}

// recordFork records a new sandbox like the one of record pm, forked for
// req (one of batch, see statedir.HandOver), or made ahead for its next
// fork when standbyFor (its ID) is set: its
// folder, lock file and record, and nothing else. The record comes first,
// so that a crash from here on leaves a sandbox that List shows (a
// standby: that PruneCaches finds) and Destroy removes. On failure the
// plan is nil when nothing was made.
func (b *Backend) recordFork(pm *meta, req backend.ForkRequest, standbyFor, batch string) (*forkPlan, error) {
	id, err := statedir.NewID()
	if err != nil {
		return nil, err
	}
	m := forkMeta(pm, id, req)
	m.StandbyFor, m.Batch = standbyFor, batch
	dir := filepath.Join(b.dir, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &forkPlan{sb: &Sandbox{b: b, id: id, dir: dir}, m: m, standby: standbyFor != ""}
	if err := os.WriteFile(filepath.Join(dir, lockFile), nil, 0o600); err != nil {
		return p, err
	}
	return p, writeMeta(dir, m)
}

// writeForkBundle makes fork p's folders but its writable layer, and
// writes its host files and bundle: the parent's config cfg, with the
// fork's ID, cgroup and host files.
func (b *Backend) writeForkBundle(p *forkPlan, cfg *specs.Spec, parent *Sandbox, ahead bool) error {
	m, dir := p.m, p.sb.dir
	dirs := []string{rootfsDir(dir, 0), workDir(dir, 0)}
	if m.Agent {
		dirs = append(dirs, agentHostDir(dir))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if _, _, err := writeHostFiles(dir, m.ID); err != nil {
		return err
	}
	fcfg, err := forkConfig(cfg, parent.id, parent.dir, m.ID, dir)
	if err != nil {
		return err
	}
	if ahead {
		lowPriority(fcfg, m.runtime())
	}
	return writeConfig(bundleDir(dir, 0), fcfg)
}

// forkMeta is the record of fork id of parent.
func forkMeta(parent *meta, id string, req backend.ForkRequest) *meta {
	m := &meta{
		Lifecycle: statedir.Lifecycle{Creator: owner.Self()},
		ID:        id,
		Name:      cmp.Or(req.Name, parent.Name),
		Session:   cmp.Or(req.Session, parent.Session),
		Owner:     cmp.Or(req.Owner, parent.Owner),
		Image:     parent.Image, ImageDigest: parent.ImageDigest,
		CreatedAt: time.Now().UTC().Truncate(time.Millisecond),
		WorkDir:   parent.WorkDir, Runtime: parent.Runtime, RuntimeRoot: parent.RuntimeRoot,
		ContainerID: containerID(parent.runtime(), id, 0), Lower: parent.Lower, Network: parent.Network,
		ReadOnly: parent.ReadOnly, Volumes: parent.Volumes, UID: parent.UID, GID: parent.GID,
		Agent: parent.Agent, Rootless: parent.Rootless,
	}
	if parent.Egress != nil {
		// Its own network and enforcer, made when it starts (forkEgress).
		e := cloneEgress(*parent.Egress)
		m.Egress = &e
	}
	// The parent's own labels, not those the backend or a pool manage.
	m.Labels = map[string]string{}
	for k, v := range parent.Labels {
		if !strings.HasPrefix(k, backend.LabelPrefix) {
			m.Labels[k] = v
		}
	}
	maps.Copy(m.Labels, req.Labels)
	m.Labels[backend.LabelForkOf] = parent.ID
	ttl := req.TTL
	if ttl == 0 && !parent.ExpiresAt.IsZero() {
		ttl = parent.ExpiresAt.Sub(parent.CreatedAt)
	}
	if ttl > 0 {
		m.ExpiresAt = m.CreatedAt.Add(ttl)
	}
	return m
}

// startFork mounts a prepared fork's root file system and runs it, or
// starts a standby's container. The fork stays recorded as being created
// (see Fork).
func (b *Backend) startFork(ctx context.Context, p *forkPlan) error {
	m := p.m
	if p.standby {
		if err := normalPriority(bundleDir(p.sb.dir, 0), cgroupName(m.ID, 0)); err != nil {
			return err
		}
		return m.runtime().startCreated(ctx, m.ContainerID, bundleDir(p.sb.dir, 0))
	}
	var parentCA string
	if m.Egress != nil {
		var err error
		if parentCA, err = b.forkEgress(ctx, p); err != nil {
			return err
		}
	}
	if !m.Rootless {
		if err := mountOverlay(m.Lower, p.sb.dir, 0); err != nil {
			return err
		}
	}
	if m.CredentialCA != "" {
		// The parent's CA, in the files copied from it, gives way to the
		// fork's own.
		if err := backendkit.InstallCA(rootfsDir(p.sb.dir, 0), m.CredentialCA, parentCA); err != nil {
			return fmt.Errorf("installing the credential broker's CA: %w", err)
		}
	}
	return p.sb.start(ctx, m)
}

// forkEgress gives fork p a network and an enforcer of its own with its
// parent's policy and, when the parent brokers credentials, a CA and
// placeholders of its own with the parent's values (the enforcer's file
// stays outside both sandboxes); the fork's OCI config then names its
// network namespace and placeholders. It returns the parent's CA
// certificate ("" without credentials).
func (b *Backend) forkEgress(ctx context.Context, p *forkPlan) (parentCA string, _ error) {
	m, dir := p.m, p.sb.dir
	parentDir := filepath.Join(b.dir, m.Labels[backend.LabelForkOf])
	var placeholders map[string]string
	data, err := os.ReadFile(credentialsFile(parentDir))
	switch {
	case err == nil:
		var br *backendkit.Brokered
		if br, parentCA, placeholders, err = backendkit.ForkCredentials(m.ID, data); err != nil {
			return "", err
		}
		if err := atomicfile.Write(credentialsFile(dir), br.EnforcerFile); err != nil {
			return "", err
		}
		if err := b.update(m, func(cur *meta) { cur.CredentialCA = br.CAPEM }); err != nil {
			return "", err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	if err := b.setupEgress(ctx, m, dir); err != nil {
		return "", err
	}
	cfg, err := readConfig(bundleDir(dir, 0))
	if err != nil {
		return "", err
	}
	in := egressInput(m, dir)
	if cfg.Linux != nil {
		for i, ns := range cfg.Linux.Namespaces {
			if ns.Type == specs.NetworkNamespace {
				cfg.Linux.Namespaces[i].Path = in.netns
			}
		}
	}
	if cfg.Process != nil {
		cfg.Process.Env = backendkit.ReplacePlaceholders(cfg.Process.Env, placeholders)
	}
	return parentCA, writeConfig(bundleDir(dir, 0), cfg)
}

// forkConfig is the parent's OCI config made the fork's: what names the
// parent (its ID as host name, HOSTNAME and agent argument; its folder in
// mount sources; its cgroup) names the fork instead.
func forkConfig(parent *specs.Spec, parentID, parentDir, id, dir string) (*specs.Spec, error) {
	data, err := json.Marshal(parent)
	if err != nil {
		return nil, err
	}
	var cfg specs.Spec
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, err
	}
	if cfg.Hostname == parentID {
		cfg.Hostname = id
	}
	for i, src := range cfg.Mounts {
		if rel, ok := strings.CutPrefix(src.Source, parentDir+string(filepath.Separator)); ok {
			cfg.Mounts[i].Source = filepath.Join(dir, rel)
		}
	}
	if cfg.Process != nil {
		for i, e := range cfg.Process.Env {
			if e == "HOSTNAME="+parentID {
				cfg.Process.Env[i] = "HOSTNAME=" + id
			}
		}
		for i, a := range cfg.Process.Args {
			if a == parentID && i > 0 && cfg.Process.Args[i-1] == "--sandbox" {
				cfg.Process.Args[i] = id
			}
		}
	}
	if cfg.Linux != nil && cfg.Linux.CgroupsPath != "" {
		cfg.Linux.CgroupsPath = "/" + cgroupParent + "/" + cgroupName(id, 0)
	}
	return &cfg, nil
}

// dropForks removes the forks made so far after a failure.
func (s *Sandbox) dropForks(ctx context.Context, plans []*forkPlan) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	for _, p := range plans {
		if p == nil {
			continue
		}
		if _, err := readMeta(p.sb.dir); errors.Is(err, backend.ErrNotFound) {
			removeTree(p.sb.dir) // failed before its record was written
			continue
		}
		if err := p.sb.teardown(cctx, p.m); err != nil {
			s.b.log.Warn("cleaning up a failed fork", "sandbox", p.sb.id, "err", err)
		}
	}
}

// freezeCgroup freezes (or thaws) the cgroup of sandbox m's running
// generation through the kernel's freezer (cgroup v2's cgroup.freeze, v1's
// freezer.state) and waits until it holds: what the runtime's pause does,
// without starting the runtime twice. It fails when the sandbox has no
// such cgroup (rootless).
func freezeCgroup(m *meta, frozen bool) error {
	name := cgroupName(m.ID, m.Gen)
	v2 := filepath.Join("/sys/fs/cgroup", cgroupParent, name)
	if _, err := os.Stat(filepath.Join(v2, "cgroup.freeze")); err == nil {
		val, want := "0", "frozen 0"
		if frozen {
			val, want = "1", "frozen 1"
		}
		if err := os.WriteFile(filepath.Join(v2, "cgroup.freeze"), []byte(val), 0); err != nil {
			return err
		}
		return waitFile(filepath.Join(v2, "cgroup.events"), want)
	}
	v1 := filepath.Join("/sys/fs/cgroup/freezer", cgroupParent, name, "freezer.state")
	val := "THAWED"
	if frozen {
		val = "FROZEN"
	}
	if err := os.WriteFile(v1, []byte(val), 0); err != nil {
		return err
	}
	return waitFile(v1, val)
}

// waitFile waits (up to 2 s) until file holds a line want.
func waitFile(file, want string) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		for line := range strings.Lines(string(data)) {
			if strings.TrimSpace(line) == want {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no %q after 2 s", file, want)
		}
		time.Sleep(200 * time.Microsecond)
	}
}
