package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pair is one figure and its floor.
type pair struct {
	name          string
	figure, floor string
	// needs names what is missing to run it ("": nothing).
	needs func(*env) string
	// measure returns the figure's and the floor's samples (ms).
	measure func(e *env, n int) (figure, floor []float64, note string, err error)
}

// pairs are the gate's figures, in the order they run.
var pairs = slices.Concat(basePairs, gvisorPairs(gvisorDebian), gvisorPairs(gvisorRelease),
	[]pair{ttfcPair("k8s-ttfc", "k8s", needK8s)})

// basePairs are the figures of runc, Docker's default runtime and the CLI.
var basePairs = []pair{
	{
		name: "cli-ls", figure: "sbx ls (local, nothing to list)", floor: "a Go program that does nothing",
		needs: func(*env) string { return "" },
		measure: func(e *env, n int) ([]float64, []float64, string, error) {
			return alternate(n, e.cmd(e.sbx, "--config", e.localConfig, "ls"), e.cmd(e.nop))
		},
	},
	{
		name: "lite-run", figure: "sbx run -- true (lite)", floor: "runc run of the same root file system",
		needs: needRoot("runc"),
		measure: func(e *env, n int) ([]float64, []float64, string, error) {
			i := 0
			return alternate(n, e.cmd(e.sbx, "--config", e.liteConfig, "run", "--", "true"), func() error {
				i++
				return e.cmd("runc", "--root", e.runcRoot, "run", "--bundle", e.bundle, fmt.Sprintf("perfgate-%d-%d", os.Getpid(), i))()
			})
		},
	},
	{
		name: "lite-exec", figure: "sbx exec ID -- true (lite)", floor: "runc exec of a running container",
		needs: needRoot("runc"),
		measure: func(e *env, n int) ([]float64, []float64, string, error) {
			id, err := e.keep(e.liteConfig)
			if err != nil {
				return nil, nil, "", err
			}
			defer e.rm(e.liteConfig, id)
			cid, stop, err := e.runcKeep()
			if err != nil {
				return nil, nil, "", err
			}
			defer stop()
			return alternate(n, e.cmd(e.sbx, "--config", e.liteConfig, "exec", id, "--", "true"), e.cmd("runc", "--root", e.runcRoot, "exec", cid, "true"))
		},
	},
	{
		name: "native-run", figure: "sbx run -- true (native)", floor: "docker run --rm of the same image",
		needs: needDocker,
		measure: func(e *env, n int) ([]float64, []float64, string, error) {
			return alternate(n, e.cmd(e.sbx, "--config", e.nativeConfig, "run", "--", "true"), e.cmd("docker", "run", "--rm", "--network", "none", testImage, "true"))
		},
	},
	{
		name: "native-exec", figure: "sbx exec ID -- true (native)", floor: "docker exec of a running container",
		needs: needDocker,
		measure: func(e *env, n int) ([]float64, []float64, string, error) {
			id, err := e.keep(e.nativeConfig)
			if err != nil {
				return nil, nil, "", err
			}
			defer e.rm(e.nativeConfig, id)
			out, err := exec.Command("docker", "run", "-d", "--rm", "--network", "none", testImage, "sleep", "3600").Output()
			if err != nil {
				return nil, nil, "", fmt.Errorf("docker run -d: %w", err)
			}
			cid := strings.TrimSpace(string(out))
			defer exec.Command("docker", "rm", "-f", cid).Run()
			return alternate(n, e.cmd(e.sbx, "--config", e.nativeConfig, "exec", id, "--", "true"), e.cmd("docker", "exec", cid, "true"))
		},
	},
	{
		name: "sbxd-exec", figure: "exec of true through the sbxd agent (native, in process)", floor: "the same through the engine's exec API",
		needs: needDocker,
		measure: func(e *env, n int) ([]float64, []float64, string, error) {
			out, err := exec.Command(e.sbx, "--config", e.nativeConfig, "--progress", "none", "bench", "exec", "--n", strconv.Itoa(max(n*10, 100)), "--json").Output()
			if err != nil {
				return nil, nil, "", fmt.Errorf("sbx bench exec: %w: %s", err, stderrOf(err))
			}
			var rep struct {
				N         int     `json:"n"`
				BaselineN int     `json:"baseline_n"`
				P50       float64 `json:"exec_p50_ms"`
				Max       float64 `json:"exec_max_ms"`
				BaseP50   float64 `json:"baseline_exec_p50_ms"`
				BaseMax   float64 `json:"baseline_exec_max_ms"`
			}
			if err := json.Unmarshal(out, &rep); err != nil || rep.P50 == 0 {
				return nil, nil, "", fmt.Errorf("sbx bench exec: no report (%v): %s", err, out)
			}
			return stats{N: rep.N, Min: rep.P50, P50: rep.P50, P90: rep.P50, Max: rep.Max}.samples(),
				stats{N: rep.BaselineN, Min: rep.BaseP50, P50: rep.BaseP50, P90: rep.BaseP50, Max: rep.BaseMax}.samples(), "p50 and max only", nil
		},
	},
	agentExecPair("lite-agent-exec", "lite", "./backends/lite/", needRoot("runc")),
	agentExecPair("native-agent-exec", "native", "./backends/native/", needDocker),
	benchPair("lite-egress", "create to first exec with an egress policy (lite)", "the same without a policy",
		"./backends/lite/", "BenchmarkEgressCreate", "egress", "plain", needRoot("runc")),
	benchPair("native-egress", "create to first exec with an egress policy (native)", "the same without a policy",
		"./backends/native/", "BenchmarkEgressCreate", "egress", "plain", needDocker),
	benchPair("broker-warm", "an HTTPS GET through the enforcer with a brokered credential, kept-alive connection", "the same GET of a host without one (spliced)",
		"./egress/", "BenchmarkBroker/warm", "broker", "plain", func(*env) string { return "" }),
	benchPair("broker-tls", "the same on a new TLS connection each", "the same, spliced",
		"./egress/", "BenchmarkBroker/new-tls", "broker", "plain", func(*env) string { return "" }),
	withEnv(benchPair("broker-download", "a 128 MiB HTTPS download with a brokered credential (its TLS ended, the answer masked)", "the same download, spliced",
		"./egress/", "BenchmarkBroker/download", "broker", "plain", func(*env) string { return "" }), "SBX_BROKER_BENCH_BYTES=134217728"),
	benchPair("lite-fork", "a fork of a running sandbox (lite)", "a create of the same sandbox",
		"./backends/lite/", "BenchmarkFork/standby", "fork", "create-baseline", needRoot("runc")),
	ttfcPair("lite-ttfc", "lite", needRoot("runc")),
	ttfcPair("native-ttfc", "native", needDocker),
}

// gvisorVariant is one gVisor the gate measures against runc: Debian's
// runsc (2022-12, ptrace platform here) or the release
// scripts/gvisor-release.sh builds (systrap).
type gvisorVariant struct {
	tag   string // "gvisor", "gvisor-release": in the pairs' names
	label string // in their figures
	// liteRuntime is SBX_LITE_RUNTIME for lite's in-process benchmark,
	// nativeRuntime the engine runtime name (SBX_NATIVE_RUNTIME).
	liteRuntime, nativeRuntime string
	// configs returns the lite and native configs of its sbx runs.
	configs              func(*env) (lite, native string)
	needLite, needNative func(*env) string
}

var (
	gvisorDebian = gvisorVariant{
		tag: "gvisor", label: "gVisor", liteRuntime: "runsc", nativeRuntime: "gvisor",
		configs:  func(e *env) (string, string) { return e.liteGVisorConfig, e.nativeGVisorConfig },
		needLite: needLiteGVisor, needNative: needDockerRuntime("runsc"),
	}
	gvisorRelease = gvisorVariant{
		tag: "gvisor-release", label: "gVisor release", liteRuntime: gvisorReleasePath(), nativeRuntime: filepath.Base(gvisorReleasePath()),
		configs:  func(e *env) (string, string) { return e.liteGVisorReleaseConfig, e.nativeGVisorReleaseConfig },
		needLite: needLiteGVisorRelease, needNative: needDockerRuntime(filepath.Base(gvisorReleasePath())),
	}
)

// gvisorPairs are v's figures: pooled against cold time to first command
// (native, lite), sbx run against the same on runc, and exec through the
// agent against a host spawn (lite, native).
func gvisorPairs(v gvisorVariant) []pair {
	run := func(backend string, needs func(*env) string, floor string) pair {
		return pair{
			name: backend + "-" + v.tag + "-run", figure: "sbx run -- true (" + backend + ", " + v.label + ")", floor: floor,
			needs: needs,
			measure: func(e *env, n int) ([]float64, []float64, string, error) {
				lite, native := v.configs(e)
				cfg, base := lite, e.liteConfig
				if backend == "native" {
					cfg, base = native, e.nativeConfig
				}
				return alternate(n, e.cmd(e.sbx, "--config", cfg, "run", "--", "true"), e.cmd(e.sbx, "--config", base, "run", "--", "true"))
			},
		}
	}
	return []pair{
		ttfcPair("native-"+v.tag+"-ttfc", "native-"+v.tag, v.needNative),
		ttfcPair("lite-"+v.tag+"-ttfc", "lite-"+v.tag, v.needLite),
		run("lite", v.needLite, "the same on runc"),
		withEnv(agentExecPair("lite-"+v.tag+"-agent-exec", "lite, "+v.label, "./backends/lite/", v.needLite), "SBX_LITE_RUNTIME="+v.liteRuntime),
		run("native", v.needNative, "the same on the engine's default runtime (runc)"),
		withEnv(agentExecPair("native-"+v.tag+"-agent-exec", "native, "+v.label, "./backends/native/", v.needNative), "SBX_NATIVE_RUNTIME="+v.nativeRuntime),
	}
}

// ttfcPair is pooled against cold time to first command on backend, from
// sbx bench ttfc (sequential mode, which alternates its rounds).
func ttfcPair(name, backend string, needs func(*env) string) pair {
	return pair{
		name: name, figure: "time to first command from a warm pool (" + backend + ")", floor: "the same, cold (create, agent, command)",
		needs: needs,
		measure: func(e *env, n int) ([]float64, []float64, string, error) {
			cfg := map[string]string{"lite": e.liteConfig, "native": e.nativeConfig, "k8s": e.k8sConfig,
				"native-gvisor": e.nativeGVisorConfig, "lite-gvisor": e.liteGVisorConfig,
				"native-gvisor-release": e.nativeGVisorReleaseConfig, "lite-gvisor-release": e.liteGVisorReleaseConfig}[backend]
			rounds := 3
			if backend == "k8s" {
				rounds = 1 // cold pods take seconds each
			}
			out, err := exec.Command(e.sbx, "--config", cfg, "--progress", "none", "bench", "ttfc", "--mode", "sequential",
				"-n", strconv.Itoa(n), "--rounds", strconv.Itoa(rounds), "--size", "2", "--json").Output()
			if err != nil {
				return nil, nil, "", fmt.Errorf("sbx bench ttfc: %w: %s", err, stderrOf(err))
			}
			var rep struct {
				Modes []struct {
					Cold          stats `json:"cold_ms"`
					Pooled        stats `json:"pooled_ms"`
					ColdFallbacks int   `json:"cold_fallbacks"`
				} `json:"modes"`
			}
			if err := json.Unmarshal(out, &rep); err != nil || len(rep.Modes) == 0 {
				return nil, nil, "", fmt.Errorf("sbx bench ttfc: no report (%v): %s", err, out)
			}
			m := rep.Modes[0]
			return m.Pooled.samples(), m.Cold.samples(), fmt.Sprintf("%d cold fallbacks", m.ColdFallbacks), nil
		},
	}
}

// benchPair is a Go benchmark of pkg that reports, with
// ReportMetric, PREFIX-p50-ms and PREFIX-p90-ms of the figure and of the
// floor, measured alternating in the benchmark itself.
func benchPair(name, figure, floor, pkg, bench, figPrefix, floorPrefix string, needs func(*env) string) pair {
	return pair{
		name: name, figure: figure, floor: floor, needs: needs,
		measure: func(e *env, n int) ([]float64, []float64, string, error) {
			c := exec.Command("go", "test", "-run", "^$", "-bench", "^"+strings.ReplaceAll(bench, "/", "$/^")+"$",
				"-benchtime", strconv.Itoa(n)+"x", "-count", "1", pkg)
			c.Dir = repoRoot()
			out, err := c.CombinedOutput()
			if err != nil {
				return nil, nil, "", fmt.Errorf("go test -bench %s %s: %w: %s", bench, pkg, err, lastLines(out, 10))
			}
			m := benchMetrics(out)
			get := func(prefix string) (stats, error) {
				p50, ok1 := m[prefix+"-p50-ms"]
				p90, ok2 := m[prefix+"-p90-ms"]
				if !ok1 || !ok2 {
					return stats{}, fmt.Errorf("go test -bench %s: no %s-p50-ms/-p90-ms in:\n%s", bench, prefix, lastLines(out, 10))
				}
				return stats{N: n, Min: p50, P50: p50, P90: p90, Max: p90}, nil
			}
			fig, err := get(figPrefix)
			if err != nil {
				return nil, nil, "", err
			}
			fl, err := get(floorPrefix)
			if err != nil {
				return nil, nil, "", err
			}
			return fig.samples(), fl.samples(), "from go test -bench " + bench + " (p50 and p90)", nil
		},
	}
}

// agentExecPair is BenchmarkAgentExec of pkg: a command through the
// sandbox's agent against a host spawn plus a socket round trip. Each
// sample is milliseconds, so it runs ten times the gate's count: the
// figure is the agent's steady state, which a sandbox's first few
// commands (cold caches, under gVisor most) would otherwise weigh on.
func agentExecPair(name, what, pkg string, needs func(*env) string) pair {
	p := benchPair(name, "exec of true through the sandbox's agent ("+what+", in process)", "a host spawn of true plus a local socket round trip",
		pkg, "BenchmarkAgentExec", "agent", "spawn", needs)
	measure := p.measure
	p.measure = func(e *env, n int) ([]float64, []float64, string, error) { return measure(e, 10*n) }
	return p
}

// benchMetrics reads the metrics of the last benchmark line of go test
// output: "VALUE UNIT" pairs after the iteration count.
func benchMetrics(out []byte) map[string]float64 {
	m := map[string]float64{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				m[f[i+1]] = v
			}
		}
	}
	return m
}

func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// stats are the percentiles sbx bench prints.
type stats struct {
	N   int     `json:"n"`
	Min float64 `json:"min"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	Max float64 `json:"max"`
}

// samples stands for s as samples whose percentiles are s's: n values,
// the lower half min..p50, the upper p50..p90 then max.
func (s stats) samples() []float64 {
	n := max(s.N, 3)
	out := make([]float64, n)
	for i := range out {
		f := float64(i) / float64(n-1)
		switch {
		case f <= 0.5:
			out[i] = s.Min + (s.P50-s.Min)*f*2
		case f <= 0.9:
			out[i] = s.P50 + (s.P90-s.P50)*(f-0.5)/0.4
		default:
			out[i] = s.P90 + (s.Max-s.P90)*(f-0.9)/0.1
		}
	}
	return out
}

// alternate runs figure and floor n times each, in turns (floor first),
// after one unmeasured run of each, and returns their times in ms.
func alternate(n int, figure, floor func() error) ([]float64, []float64, string, error) {
	var fig, fl []float64
	for i := -1; i < n; i++ {
		if i == 0 {
			// The first round (not counted) may have written much (lite
			// unpacks its image): until the kernel has written that back,
			// every file-system change waits on it (a new lite state
			// folder measured 6-9 ms slower per sbx run for a minute or
			// so). Measured is the steady state a user's machine is in.
			syscall.Sync()
		}
		for _, side := range []struct {
			run func() error
			to  *[]float64
		}{{floor, &fl}, {figure, &fig}} {
			start := time.Now()
			if err := side.run(); err != nil {
				return nil, nil, "", err
			}
			if i >= 0 {
				*side.to = append(*side.to, float64(time.Since(start).Microseconds())/1000)
			}
		}
	}
	return fig, fl, "", nil
}

// cmd runs argv, its output discarded, failing with its stderr.
func (e *env) cmd(argv ...string) func() error {
	return func() error {
		c := exec.Command(argv[0], argv[1:]...)
		var stderr bytes.Buffer
		c.Stderr = &stderr
		if err := c.Run(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
		}
		return nil
	}
}

// keep starts a sandbox of config's main entry that stays, and returns its ID.
func (e *env) keep(config string) (string, error) {
	c := exec.Command(e.sbx, "--config", config, "--progress", "none", "run", "--keep", "--", "true")
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("sbx run --keep: %w: %s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

func (e *env) rm(config, id string) {
	exec.Command(e.sbx, "--config", config, "rm", id).Run()
}

// runcKeep starts a runc container of the bundle running sleep, and
// returns its ID and how to remove it.
func (e *env) runcKeep() (string, func(), error) {
	id := fmt.Sprintf("perfgate-keep-%d", os.Getpid())
	cfg := filepath.Join(e.bundle, "config.json")
	orig, err := os.ReadFile(cfg)
	if err != nil {
		return "", nil, err
	}
	// A second bundle whose process sleeps, sharing the root file system.
	dir, err := os.MkdirTemp(e.work, "bundle-keep-")
	if err != nil {
		return "", nil, err
	}
	var spec map[string]any
	if err := json.Unmarshal(orig, &spec); err != nil {
		return "", nil, err
	}
	spec["process"].(map[string]any)["args"] = []string{"sleep", "3600"}
	spec["root"].(map[string]any)["path"] = filepath.Join(e.bundle, "rootfs")
	data, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		return "", nil, err
	}
	// Its output goes to a file: the container would hold a pipe open,
	// and the wait for it, until it ends.
	logf, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		return "", nil, err
	}
	defer logf.Close()
	c := exec.Command("runc", "--root", e.runcRoot, "run", "-d", "--bundle", dir, id)
	c.Stdout, c.Stderr = logf, logf
	if err := c.Run(); err != nil {
		log, _ := os.ReadFile(logf.Name())
		return "", nil, fmt.Errorf("runc run -d: %w: %s", err, log)
	}
	return id, func() { exec.Command("runc", "--root", e.runcRoot, "delete", "-f", id).Run() }, nil
}

func needRoot(tool string) func(*env) string {
	return func(*env) string {
		if os.Geteuid() != 0 {
			return "needs root"
		}
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " is not on PATH"
		}
		return ""
	}
}

func needDocker(*env) string {
	if err := exec.Command("docker", "image", "inspect", testImage).Run(); err != nil {
		return "no Docker engine with " + testImage + " (scripts/docker-setup.sh)"
	}
	return ""
}

// needLiteGVisor: root, runc and runsc (lite's floor and its gVisor).
func needLiteGVisor(e *env) string {
	if why := needRoot("runc")(e); why != "" {
		return why
	}
	return needRoot("runsc")(e)
}

// needDockerRuntime: a Docker engine with the test image and runtime name
// registered (scripts/docker-setup.sh registers Debian's runsc as "runsc"
// and gVisor's release under its file name).
func needDockerRuntime(name string) func(*env) string {
	return func(e *env) string {
		if why := needDocker(e); why != "" {
			return why
		}
		out, err := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").Output()
		if err != nil || !strings.Contains(string(out), `"`+name+`"`) {
			return "the Docker engine has no " + name + " runtime (scripts/docker-setup.sh registers it)"
		}
		return ""
	}
}

// gvisorReleasePath is where scripts/gvisor-release.sh installs gVisor's
// release (SBX_GVISOR_RELEASE_PATH when set, as for the script).
func gvisorReleasePath() string {
	if p := os.Getenv("SBX_GVISOR_RELEASE_PATH"); p != "" {
		return p
	}
	return "/usr/local/sbin/runsc-20260905"
}

// needLiteGVisorRelease: root, runc and gVisor's release.
func needLiteGVisorRelease(e *env) string {
	if why := needRoot("runc")(e); why != "" {
		return why
	}
	if fi, err := os.Stat(gvisorReleasePath()); err != nil || fi.Mode()&0o111 == 0 {
		return "no gVisor release at " + gvisorReleasePath() + " (scripts/gvisor-release.sh)"
	}
	return ""
}

func needK8s(e *env) string {
	if e.k8sConfig == "" {
		return "no k8s harness (scripts/k8s-harness.sh up)"
	}
	return ""
}

func stderrOf(err error) string {
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		return strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}

// withEnv is p with the environment variables kv ("NAME=value") set while
// it measures, for the commands it starts (pairs run one at a time).
func withEnv(p pair, kv ...string) pair {
	measure := p.measure
	p.measure = func(e *env, n int) ([]float64, []float64, string, error) {
		for _, x := range kv {
			k, v, _ := strings.Cut(x, "=")
			old, had := os.LookupEnv(k)
			os.Setenv(k, v)
			defer func() {
				if had {
					os.Setenv(k, old)
				} else {
					os.Unsetenv(k)
				}
			}()
		}
		return measure(e, n)
	}
	return p
}
