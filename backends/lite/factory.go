package lite

import (
	"context"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Factory opens the lite backend from a config file's [sandbox.lite] table
// (or [sandbox.agentdocker-lite], OpenSage's name for it). Its folders, and
// a runtime given as a path, resolve like the file's other host paths;
// [sandbox] default_image is the image of sandboxes that name none.
// backend = "auto" chooses it when no Docker daemon answers and runc can
// run here (as root, or rootless).
//
// It reads OpenSage's agentdocker-lite keys in the entries' [extra] tables:
// cpu_max (cgroup cpu.max, "QUOTA PERIOD"), memory_max and pids_max become
// the sandbox's CPU, memory and pids limits (see EntrySpec); fs_backend
// must be "overlayfs", the only one lite has; env_base_dir and
// rootfs_cache_dir are the state_dir and image_dir when [sandbox.lite]
// leaves those empty (one backend has one of each, so entries that set them
// must agree).
var Factory = backend.Factory{
	Name:      Name,
	Aliases:   []string{"agentdocker-lite"},
	NewConfig: func() any { return new(Config) },
	Open: func(_ context.Context, req backend.OpenRequest) (backend.Backend, error) {
		c, err := backend.TableAs[Config](Name, req.Table)
		if err != nil {
			return nil, err
		}
		for _, x := range []struct {
			key string
			dst *string
			own string
		}{{"env_base_dir", &c.StateDir, "state_dir"}, {"rootfs_cache_dir", &c.ImageDir, "image_dir"}} {
			if *x.dst == "" {
				if *x.dst, err = agreedExtra(req.Settings, x.key, x.own); err != nil {
					return nil, err
				}
			}
		}
		paths := []backend.HostPathField{
			{Key: "sandbox.lite.state_dir", Path: &c.StateDir},
			{Key: "sandbox.lite.image_dir", Path: &c.ImageDir},
			{Key: "sandbox.lite.runtime_root", Path: &c.RuntimeRoot},
			{Key: "sandbox.lite.sbxd_path", Path: &c.SbxdPath},
		}
		// A runtime given as a path (not a bare name) resolves too.
		if strings.Contains(c.Runtime, "/") {
			paths = append(paths, backend.HostPathField{Key: "sandbox.lite.runtime", Path: &c.Runtime})
		}
		if err := backend.ResolveHostPaths(req.Settings, paths...); err != nil {
			return nil, err
		}
		c.DefaultImage = req.Settings.DefaultImage()
		return New(c, WithLogger(req.Logger))
	},
	EntryExtraKeys: []string{"cpu_max", "memory_max", "pids_max", "fs_backend", "env_base_dir", "rootfs_cache_dir"},
	EntrySpec:      EntrySpec,
	AutoRank:       20, // New checks privileges and finds the runtime
}

// EntrySpec applies an entry's agentdocker-lite [extra] keys to its Spec:
// cpu_max ("QUOTA PERIOD" in microseconds, or "max [PERIOD]") is
// Resources.CPUs = QUOTA/PERIOD; memory_max (bytes, a size like "512M", or
// "max") is Resources.MemoryBytes; pids_max (a count or "max") is
// Resources.PidsLimit. A key that contradicts the entry's own cpus,
// mem_limit or pids_limit is an error; fs_backend other than "overlayfs" is
// refused. env_base_dir and rootfs_cache_dir are read by Open.
func EntrySpec(extra map[string]any, spec *backend.Spec) error {
	r := &spec.Resources
	if v, ok := extra["cpu_max"]; ok {
		cpus, err := parseCPUMax(v)
		if err != nil {
			return fmt.Errorf("cpu_max: %w", err)
		}
		if err := setLimit("cpu_max", "cpus", &r.CPUs, cpus); err != nil {
			return err
		}
	}
	if v, ok := extra["memory_max"]; ok {
		n, err := parseMax(v, true)
		if err != nil {
			return fmt.Errorf("memory_max: %w", err)
		}
		if err := setLimit("memory_max", "mem_limit", &r.MemoryBytes, n); err != nil {
			return err
		}
	}
	if v, ok := extra["pids_max"]; ok {
		n, err := parseMax(v, false)
		if err != nil {
			return fmt.Errorf("pids_max: %w", err)
		}
		if err := setLimit("pids_max", "pids_limit", &r.PidsLimit, n); err != nil {
			return err
		}
	}
	if v, ok := extra["fs_backend"]; ok && v != "overlayfs" {
		return fmt.Errorf(`fs_backend: %s is not supported by the lite backend, which has only "overlayfs" (remove the key or set it to "overlayfs")`, describe(v))
	}
	for _, k := range []string{"env_base_dir", "rootfs_cache_dir"} {
		if v, ok := extra[k]; ok {
			if s, ok := v.(string); !ok || s == "" {
				return fmt.Errorf("%s: want a folder path, got %s", k, describe(v))
			}
		}
	}
	return nil
}

// setLimit sets *dst to v unless the entry's own key already set another
// value (0 on both sides: no limit).
func setLimit[T comparable](key, entryKey string, dst *T, v T) error {
	var zero T
	if *dst != zero && v != zero && *dst != v {
		return fmt.Errorf("%s gives %v, but the entry's %s gives %v (set one of them)", key, v, entryKey, *dst)
	}
	if v != zero {
		*dst = v
	}
	return nil
}

// parseCPUMax reads cgroup v2 cpu.max: "QUOTA PERIOD" (microseconds;
// PERIOD defaults to 100000) or "max [PERIOD]" (no limit: 0).
func parseCPUMax(v any) (float64, error) {
	s, ok := v.(string)
	if !ok {
		if n, isInt := v.(int64); isInt {
			s = strconv.FormatInt(n, 10)
		} else {
			return 0, fmt.Errorf(`want "QUOTA PERIOD" in microseconds (e.g. "50000 100000" for half a CPU), got %s`, describe(v))
		}
	}
	f := strings.Fields(s)
	bad := fmt.Errorf(`want "QUOTA PERIOD" in microseconds (e.g. "50000 100000" for half a CPU) or "max", got %q`, s)
	if len(f) == 0 || len(f) > 2 {
		return 0, bad
	}
	period := int64(100000)
	if len(f) == 2 {
		p, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || p < 1000 || p > 1000000 {
			return 0, fmt.Errorf("%w (PERIOD is 1000 to 1000000)", bad)
		}
		period = p
	}
	if f[0] == "max" {
		return 0, nil
	}
	quota, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || quota <= 0 {
		return 0, bad
	}
	cpus := float64(quota) / float64(period)
	if cpus < backend.MinCPUs || cpus > backend.MaxCPUs {
		return 0, fmt.Errorf("%q is %v CPUs; want %v to %v", s, cpus, backend.MinCPUs, float64(backend.MaxCPUs))
	}
	return cpus, nil
}

var memRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?i)^(\d+)([kmgt]?)$`) })

// parseMax reads a cgroup v2 limit: a non-negative integer (with a K, M, G
// or T suffix when sized, as memory.max accepts) or "max" (no limit: 0).
func parseMax(v any, sized bool) (int64, error) {
	want := `want a count or "max"`
	if sized {
		want = `want bytes, a size like "512M" or "4G", or "max"`
	}
	switch v := v.(type) {
	case int64:
		if v < 0 {
			return 0, fmt.Errorf("%s, got %d", want, v)
		}
		return v, nil
	case string:
		s := strings.TrimSpace(v)
		if s == "max" {
			return 0, nil
		}
		m := memRE().FindStringSubmatch(s)
		if m == nil || (!sized && m[2] != "") {
			return 0, fmt.Errorf("%s, got %q", want, v)
		}
		n, err := strconv.ParseInt(m[1], 10, 64)
		shift := 10 * (strings.Index("kmgt", strings.ToLower(m[2])) + 1)
		if err != nil || (m[2] != "" && n > math.MaxInt64>>shift) {
			return 0, fmt.Errorf("%q is too large", v)
		}
		if m[2] != "" {
			n <<= shift
		}
		return n, nil
	}
	return 0, fmt.Errorf("%s, got %s", want, describe(v))
}

func describe(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%v (%T)", v, v)
}

// agreedExtra is the value the entries give extra.KEY, "" when none does;
// entries that disagree are an error, which points to [sandbox.lite] own.
func agreedExtra(s backend.Settings, key, own string) (string, error) {
	values := s.Extras(key)
	val, from := "", ""
	for _, name := range slices.Sorted(maps.Keys(values)) {
		v, _ := values[name].(string)
		if v == "" {
			continue
		}
		if val != "" && v != val {
			return "", backend.InvalidConfigf("sandbox.sandboxes.%s.extra.%s = %q differs from %q in entry %s: the lite backend has one %s for every entry (set it once as [sandbox.lite] %s)",
				name, key, v, val, from, key, own)
		}
		val, from = v, name
	}
	return val, nil
}
