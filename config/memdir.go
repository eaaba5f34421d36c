package config

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
)

// sharedMemKey is the [sandbox] key of the host folder every sandbox
// shares (OpenSage's host_shared_mem_dir).
const sharedMemKey = "sandbox.host_shared_mem_dir"

// SharedMemTarget is where host_shared_mem_dir appears inside every
// sandbox: [sandbox.paths] mem_root (default /mem) + "/shared".
func (c *Config) SharedMemTarget() string {
	return path.Join(cmp.Or(c.Sandbox.Paths.MemRoot, "/mem"), "shared")
}

// SharedMemDir returns [sandbox] host_shared_mem_dir as the absolute host
// folder mounted at SharedMemTarget ("" when unset). OpenSage takes only an
// absolute path; "~" is expanded too. With a backend whose host paths are
// another machine's (remotedocker), the path is that machine's, written
// absolute, and is neither expanded nor made here.
func (c *Config) SharedMemDir() (string, error) {
	dir := c.Sandbox.HostSharedMemDir
	if dir == "" {
		return "", nil
	}
	if c.remoteHostPaths != "" {
		if !path.IsAbs(dir) {
			return "", fmt.Errorf("%q is not an absolute path: the %s backend mounts folders of its remote host, so write an absolute path on that host", dir, c.remoteHostPaths)
		}
		return path.Clean(dir), nil
	}
	if !filepath.IsAbs(dir) && !isHomePath(dir) {
		return "", fmt.Errorf(`%q is not an absolute path: write the host folder as one, e.g. "/srv/agent-mem" or "~/agent-mem"`, dir)
	}
	return resolveHostPath(dir, c.Dir)
}

func isHomePath(p string) bool { return p == "~" || strings.HasPrefix(p, "~/") }

// checkHostSharedMemDir reports a malformed host_shared_mem_dir once for
// the file (building each entry's Spec skips it while loading).
func (p *parser) checkHostSharedMemDir() {
	if _, err := p.cfg.SharedMemDir(); err != nil {
		p.errorf(sharedMemKey, "%v", err)
	}
}

// sharedMem mounts host_shared_mem_dir read-write at SharedMemTarget in
// the entry's sandbox. An entry that attaches to an existing container
// (container_id, pod_name) gets no mount: nothing is created for it.
func (b *specBuilder) sharedMem() {
	if b.c.Sandbox.HostSharedMemDir == "" || b.spec.Existing != "" {
		return
	}
	dir, err := b.c.SharedMemDir()
	if err != nil {
		if !b.loading {
			b.fail(sharedMemKey, "%v", err)
		}
		return
	}
	v := backend.Volume{Type: backend.VolumeBind, Source: dir, Target: b.c.SharedMemTarget()}
	b.addVolume(sharedMemKey, dir+":"+v.Target+":rw", v, "", nil, false)
}

// refuseSharedMem refuses host_shared_mem_dir on a backend that cannot
// mount host folders (backend.Factory.NoHostFolders), naming the key and
// the backend.
func (c *Config) refuseSharedMem() error {
	if c.Sandbox.HostSharedMemDir == "" {
		return nil
	}
	name, f, ok := c.selectedFactory()
	if !ok || !f.NoHostFolders {
		return nil
	}
	return &configError{
		msg: fmt.Sprintf("%s: %s: the %s backend cannot mount a host folder into its sandboxes, so it cannot share %s at %s (remove the key, or select a backend that mounts host folders: native, lite, remotedocker or k8s)",
			c.Describe(), sharedMemKey, name, c.Sandbox.HostSharedMemDir, c.SharedMemTarget()),
		sentinel: errors.ErrUnsupported,
	}
}

// makeSharedMemDir creates host_shared_mem_dir (0755, with its parents)
// when it is missing, as OpenSage does before mounting it. A remote host's
// folder is left to that host.
func (c *Config) makeSharedMemDir() error {
	dir, err := c.SharedMemDir()
	if dir == "" || err != nil || c.remoteHostPaths != "" {
		return err
	}
	switch fi, err := os.Stat(dir); {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return invalidf("%s: %s: %s is not a folder", c.Describe(), sharedMemKey, dir)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: %s: %w", c.Describe(), sharedMemKey, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%s: %s: making the folder: %w", c.Describe(), sharedMemKey, err)
	}
	return nil
}

// makesHostPaths reports whether a missing mount_host_paths folder is made
// rather than skipped: unless the selected backend cannot mount host
// folders (backend.Factory.NoHostFolders).
func (c *Config) makesHostPaths() bool {
	_, f, ok := c.selectedFactory()
	return !ok || !f.NoHostFolders
}

// makeMountHostPaths makes (0755, with parents) the mount_host_paths
// folders of spec's volumes that are missing on this machine, as Docker
// makes a missing bind source for OpenSage. A remote host's folders
// (remotedocker) are not made: they must exist there, as its
// host_shared_mem_dir must.
func (c *Config) makeMountHostPaths(spec backend.Spec) error {
	if c.remoteHostPaths != "" || !c.makesHostPaths() {
		return nil
	}
	for _, s := range c.Sandbox.MountHostPaths {
		v, skip, err := parseVolumeOn(s, hostPaths{dir: c.Dir})
		if err != nil || skip == "" || !slices.ContainsFunc(spec.Volumes, func(x backend.Volume) bool {
			return x.Type == backend.VolumeBind && x.Source == v.Source && x.Target == v.Target
		}) {
			continue
		}
		if err := os.MkdirAll(v.Source, 0o755); err != nil {
			return fmt.Errorf("%s: sandbox.mount_host_paths: volume %q: making the host folder: %w", c.Describe(), s, err)
		}
	}
	return nil
}
