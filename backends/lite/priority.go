package lite

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Containers made ahead in the background (the standby a Reset starts
// next, the one the next fork starts, a pool's new member: Spec.Ahead) are
// made at the lowest CPU weight their cgroup takes: their runtime's create
// costs tens of milliseconds of CPU under runc and about a hundred under
// gVisor (it boots the sentry), and on a small host it ran beside the
// command a task sent to the sandbox a pool had just handed it (lite on
// gVisor, sbx bench ttfc --mode sequential: pooled p50 13.6 ms with the
// standby made at the normal weight, 9.8 ms with none made; the pool's new
// members made at the normal weight, p90 29-67 ms, mean 49, over six runs
// alternating with members made at the lowest: 26-43, mean 34; p50 12-17
// ms either way). The weight is the cgroup's, in the OCI config (cpu
// shares, which runc and runsc turn into cpu.weight on cgroup v2), so
// everything the runtime starts in the container's cgroup gets it. A
// standby gets the normal weight back before it starts (normalPriority), a
// pool's member once its runtime's run has returned (startCreate), and so
// does a create someone waits for (lowCreate.hurry): a Destroy or Reset of
// its sandbox, which waits for its lock, or Backend.Close. Nice would not
// do: gVisor gives the stub processes it starts for the sandbox's own
// processes, long after the create, the sentry's priority at its boot.
//
// Under runc or crun on cgroup v1 the low weight is not in the config but in the
// cgroup, which lite makes before the create (see lowByCgroup).
//
// Rootless sandboxes have no cgroup and are made at the normal weight.
const lowShares uint64 = 2 // the least cgroup v1 takes

// Normal weights: cgroup v1's cpu.shares and v2's cpu.weight defaults,
// which lite leaves its containers at.
const (
	normalShares = "1024"
	normalWeight = "100"
)

// lowPriority sets cfg's container, to be made by rt, to be made at low
// CPU weight: in cfg, unless its cgroup carries the weight (lowByCgroup).
func lowPriority(cfg *specs.Spec, rt *ociRuntime) {
	if cfg.Linux == nil || cfg.Linux.CgroupsPath == "" || lowByCgroup(rt) {
		return
	}
	if cfg.Linux.Resources == nil {
		cfg.Linux.Resources = &specs.LinuxResources{}
	}
	if cfg.Linux.Resources.CPU == nil {
		cfg.Linux.Resources.CPU = &specs.LinuxCPU{}
	}
	shares := lowShares
	cfg.Linux.Resources.CPU.Shares = &shares
}

// normalPriority gives the container of bundle, whose cgroup is cgroup,
// the normal CPU weight: in the cgroup, and in its OCI config, from which
// a later run of the generation (a Reset in place) and the standbys and
// forks made from it start.
func normalPriority(bundle, cgroup string) error {
	setNormalWeight(cgroup)
	cfg, err := readConfig(bundle)
	if err != nil {
		return err
	}
	r := cfg.Linux.Resources
	if r == nil || r.CPU == nil || r.CPU.Shares == nil || *r.CPU.Shares != lowShares {
		return nil
	}
	r.CPU.Shares = nil
	if *r.CPU == (specs.LinuxCPU{}) {
		r.CPU = nil
	}
	return writeConfig(bundle, cfg)
}

// lowByCgroup reports whether a container of runtime rt made at low CPU
// weight gets it from its cgroup, which lite makes with the weight in it
// before the create (makeLowCgroup), rather than from its OCI config: on a
// host with cgroup v1's cpu hierarchy, under any runtime but gVisor's. runc
// writes the cpu shares a config asks for there and reads them back,
// failing the create when they differ ("the minimum allowed cpu-shares is
// 1024"), which they did when hurry wrote the normal weight in between; a
// runtime joins a cgroup that exists and writes no weight its config does
// not ask for. runsc reads nothing back, nor does runc on cgroup v2.
func lowByCgroup(rt *ociRuntime) bool {
	return !rt.gvisor() && cpuV1Root() != ""
}

// cpuV1Root returns the root of cgroup v1's cpu hierarchy, or "".
var cpuV1Root = sync.OnceValue(func() string {
	for _, root := range cgroupRoots() {
		if _, err := os.Stat(filepath.Join(root, "cpu.shares")); err == nil {
			return root
		}
	}
	return ""
})

// makeLowCgroup makes cgroup in cgroup v1's cpu hierarchy with the lowest
// CPU weight, for a container that will join it (lowByCgroup). A failure
// leaves the container to be made at the normal weight; what was made goes
// with the container's cgroup (removeCgroups).
func makeLowCgroup(cgroup string) error {
	d := filepath.Join(cpuV1Root(), cgroupParent, cgroup)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	_, err := writeExisting(filepath.Join(d, "cpu.shares"), strconv.FormatUint(lowShares, 10))
	return err
}

// setNormalWeight writes the normal CPU weight into cgroup, in the
// hierarchy that has the cpu controller (v1) or the unified one (v2).
func setNormalWeight(cgroup string) {
	for _, d := range cgroupDirs(cgroup) {
		writeExisting(filepath.Join(d, "cpu.shares"), normalShares)
		writeExisting(filepath.Join(d, "cpu.weight"), normalWeight)
	}
}

// writeExisting writes data to the file at p if it exists (a cgroup's
// file; cgroupfs makes no files) and says whether it did; a file that is
// not there is no error.
func writeExisting(p, data string) (bool, error) {
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_, err = f.WriteString(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err == nil, err
}

// startCreate starts Create's container (generation m.Gen). A sandbox
// made ahead of need (Spec.Ahead: a pool's member) is started at low CPU
// weight, as a standby is made, and gets the normal weight once started:
// the runtime's work (under gVisor, the sentry's boot) yields to the
// sandboxes in use, and what runs in the sandbox later does not.
func (s *Sandbox) startCreate(ctx context.Context, m *meta, ahead bool) error {
	if !ahead || m.Rootless {
		return s.start(ctx, m)
	}
	bundle, cgroup := bundleDir(s.dir, m.Gen), cgroupName(s.id, m.Gen)
	cfg, err := readConfig(bundle)
	if err != nil {
		return err
	}
	lowPriority(cfg, m.runtime())
	if err := writeConfig(bundle, cfg); err != nil {
		return err
	}
	done := s.b.startLow(m, cgroup)
	err = s.start(ctx, m)
	done()
	if err != nil {
		return err
	}
	return normalPriority(bundle, cgroup)
}

// lowCreate is a container being made at low CPU weight.
type lowCreate struct {
	cgroup string
	done   chan struct{} // closed once the create has returned
	once   sync.Once
}

// startLow records that a container of sandbox m, of cgroup, is being
// made at low weight, making its cgroup where that carries the weight
// (lowByCgroup); done forgets it once the create has returned. A backend
// waiting for its background work hurries it at once.
func (b *Backend) startLow(m *meta, cgroup string) (done func()) {
	id := m.ID
	if !m.Rootless && lowByCgroup(m.runtime()) {
		if err := makeLowCgroup(cgroup); err != nil {
			b.log.Debug("making a cgroup at low CPU weight; the container is made at the normal one", "sandbox", id, "err", err)
		}
	}
	l := &lowCreate{cgroup: cgroup, done: make(chan struct{})}
	b.lows.Store(id, l)
	// After the store: a waitBackground that began meanwhile either
	// finds l or is seen here.
	if b.urgent.Load() > 0 {
		l.hurry()
	}
	return func() {
		b.lows.CompareAndDelete(id, l)
		close(l.done)
	}
}

// hurry gives sandbox id's container being made at low weight, if there
// is one, the normal weight: its caller is about to wait for it.
func (b *Backend) hurry(id string) {
	if l, ok := b.lows.Load(id); ok {
		l.(*lowCreate).hurry()
	}
}

// waitBackground waits for the background work (Reset's and Fork's
// containers made ahead), hurrying what it makes meanwhile.
func (b *Backend) waitBackground() {
	b.urgent.Add(1)
	defer b.urgent.Add(-1)
	b.lows.Range(func(_, l any) bool {
		l.(*lowCreate).hurry()
		return true
	})
	b.bg.Wait()
}

// hurry sets the normal weight until the create has returned: the cgroup
// may not exist yet, and the runtime writes the config's weight when it
// makes it.
func (l *lowCreate) hurry() {
	l.once.Do(func() {
		go func() {
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				setNormalWeight(l.cgroup)
				select {
				case <-l.done:
					setNormalWeight(l.cgroup)
					return
				case <-tick.C:
				}
			}
		}()
	})
}
