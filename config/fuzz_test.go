package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Parsing any file either succeeds, with every entry turning into a Spec
// whose values are in range, or fails with ErrInvalidConfig (or
// ErrUnsupported for options this version cannot carry out); it never
// panics.
func FuzzParseConfig(f *testing.F) {
	for _, seed := range []string{
		"[sandbox.sandboxes.main]\nimage = \"alpine\"\n",
		"PORT = 18080\n[sandbox]\nbackend = \"local\"\n[sandbox.sandboxes.main]\ncommand = \"sh -c 'echo ${PORT}'\"\nports = { \"8000/tcp\" = \"${PORT}\" }\n",
		"[sandbox.sandboxes.main]\nvolumes = [\"./data:/data:ro\", \"cache:/cache\"]\nmounts = [\"type=bind,source=/tmp,target=/t\"]\n",
		"[sandbox.sandboxes.main]\nmem_limit = \"1.5g\"\ncpus = \"0.5\"\nshm_size = 64\ngpus = \"device=0,1\"\nttl = \"90s\"\n",
		"[sandbox]\nbackend = \"remotedocker\"\ndocker_host = \"ssh://h\"\n[sandbox.sandboxes.w]\nvolumes = [\"/srv/x:/x\"]\n",
		"[sandbox.sandboxes.o]\n[sandbox.sandboxes.o.extra]\nopensandbox_timeout_sec = 60\n",
		"[sandbox.sandboxes.main]\nproject_relative_dockerfile_path = \"Dockerfile\"\n[sandbox.sandboxes.main.build_args]\nA = 1\n",
	} {
		f.Add(seed)
	}
	reg := builtinRegistry()
	f.Fuzz(func(t *testing.T, text string) {
		cfg, err := reg.ParseConfig([]byte(text), "fuzz/sandbox.toml")
		if err != nil {
			if !errors.Is(err, backend.ErrInvalidConfig) {
				t.Fatalf("error without ErrInvalidConfig: %v", err)
			}
			return
		}
		for _, name := range cfg.SandboxNames() {
			spec, err := cfg.Spec(name)
			if err != nil {
				if !errors.Is(err, backend.ErrInvalidConfig) && !errors.Is(err, errors.ErrUnsupported) {
					t.Fatalf("entry %s: error without a sentinel: %v", name, err)
				}
				continue
			}
			if err := spec.Resources.Validate(); err != nil {
				t.Fatalf("entry %s: a loaded Spec has limits out of range: %v", name, err)
			}
			for _, p := range spec.Ports {
				if p.Port < 1 || p.Port > 65535 || p.HostPort < 0 || p.HostPort > 65535 {
					t.Fatalf("entry %s: port out of range: %+v", name, p)
				}
			}
			for _, v := range spec.Volumes {
				if !strings.HasPrefix(v.Target, "/") {
					t.Fatalf("entry %s: volume target %q is not absolute", name, v.Target)
				}
			}
		}
	})
}

// A volume spec either parses to a volume with an absolute target, is
// skipped with a reason, or is an error; never a panic.
func FuzzParseVolume(f *testing.F) {
	for _, seed := range []string{"/a:/b", "./x:/y:ro", "name:/data:rw", "~/c:/c", "/a:/b:rx", ":", "a::b", "/a:relative"} {
		f.Add(seed, false)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, spec string, remote bool) {
		hp := hostPaths{dir: dir}
		if remote {
			hp.remote = "remotedocker"
		}
		v, skip, err := parseVolumeOn(spec, hp)
		if err != nil || skip != "" {
			return
		}
		if !strings.HasPrefix(v.Target, "/") || v.Source == "" {
			t.Fatalf("%q parsed to %+v", spec, v)
		}
		m, skip, err := parseMount("type=bind,source="+v.Source+",target="+v.Target, hp)
		if err == nil && skip == "" && m.Target != v.Target {
			t.Fatalf("%q: the same volume as a mount has target %q", spec, m.Target)
		}
	})
}

// A port key and binding either parse into range or fail.
func FuzzParsePort(f *testing.F) {
	for _, seed := range []string{"8080", "8080/tcp", "53/udp", "0", "70000", "80/sctp", "/tcp", "1/TCP"} {
		f.Add(seed, "127.0.0.1", 18080)
	}
	f.Fuzz(func(t *testing.T, key, host string, hostPort int) {
		var b PortBinding
		if err := b.UnmarshalTOML(int64(hostPort)); err != nil {
			return
		}
		b.HostIP = host
		p, err := parsePort(key, b)
		if err != nil {
			return
		}
		if p.Port < 1 || p.Port > 65535 || (p.Protocol != "tcp" && p.Protocol != "udp") || p.HostPort < 0 || p.HostPort > 65535 {
			t.Fatalf("%q -> %+v", key, p)
		}
	})
}

// Splitting a command never panics.
func FuzzSplitCommand(f *testing.F) {
	for _, seed := range []string{`sh -c 'echo "$X"'`, `a\ b "c d" 'e'`, `"unterminated`, `x > y | z`, ``} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		argv, shell, err := splitCommand(s)
		if shell && (argv != nil || err != nil) {
			t.Fatalf("%q: shell with argv %q, err %v", s, argv, err)
		}
	})
}

// Reading docker_args (outside input) never panics, and what it accepts
// names a supported flag.
func FuzzDockerArgs(f *testing.F) {
	for _, seed := range [][2]string{
		{"--cap-add=SYS_PTRACE", "--security-opt"}, {"-m512m", "-e"}, {"--memory", "1g"},
		{"-p", "127.0.0.1:1:2/udp"}, {"--add-host", "a:1.2.3.4"}, {"-", "--"}, {"--x=", " -"},
	} {
		f.Add(seed[0], seed[1])
	}
	reg := builtinRegistry()
	f.Fuzz(func(t *testing.T, a, b string) {
		args, err := splitDockerArgs([]string{a, b})
		if err == nil {
			for _, x := range args {
				if _, ok := lookupDockerFlag(x.name); !ok {
					t.Fatalf("%q %q: accepted unknown flag %q", a, b, x.name)
				}
			}
		}
		cfg, err := reg.ParseConfig(fmt.Appendf(nil, "[sandbox.sandboxes.x]\nimage = \"busybox\"\ndocker_args = [%q, %q]\n", a, b), "fuzz/sandbox.toml")
		if err != nil {
			if !errors.Is(err, backend.ErrInvalidConfig) {
				t.Fatalf("error without ErrInvalidConfig: %v", err)
			}
			return
		}
		if _, err := cfg.Spec("x"); err != nil && !errors.Is(err, backend.ErrInvalidConfig) {
			t.Fatalf("Spec: error without ErrInvalidConfig: %v", err)
		}
	})
}
