package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/fileops"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// withBenchExec adds `bench exec`, `bench create` and `bench ttfc` to the
// bench command, whoever made it.
func (a *app) withBenchExec(bench *cobra.Command) *cobra.Command {
	bench.AddCommand(a.benchExecCmd(), a.benchCreateCmd(), a.benchTTFCCmd())
	return bench
}

type benchExecOptions struct {
	n, baselineN int
	image, entry string
	compare      string
}

func (a *app) benchExecCmd() *cobra.Command {
	var o benchExecOptions
	cmd := &cobra.Command{
		Use:   "exec",
		Short: "Measure exec and file latency through sbxd against the plain path",
		Long: `Exec makes one sandbox and measures, in the same run:

  - exec latency of "true" through the sbxd agent and through the backend's
    plain per-command path (p50, and p99 beyond 100 samples, else the
    maximum), measured in alternating rounds once the agent runs, and the
    ratio of the p50s;
  - reading and writing a 4 KiB file through the agent tools (fileops);
  - copying 64 MiB in and back out (MB/s, both directions together);
  - the agent's resident memory afterwards;
  - with --compare BACKEND, sbxd exec latency on that backend too, measured
    in rounds alternating with this one's, and the ratio of the two p50s.

It exits 1 when the agent cannot start in the sandbox.`,
		Example: `  sbx bench exec --backend native --json
  sbx bench exec --backend remotedocker --compare native --json
  sbx bench exec --n 1000 --image sandboxkit-test/busybox:1`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.benchExec(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.n, "n", 500, "measured calls per operation through sbxd")
	f.IntVar(&o.baselineN, "baseline-n", 50, "measured calls of the plain per-command path (slow on some backends)")
	f.StringVar(&o.image, "image", "", "image to use instead of the entry's")
	f.StringVar(&o.entry, "sandbox", "", `config entry to make the sandbox from (default "main", or the only entry)`)
	f.StringVar(&o.compare, "compare", "", "also measure sbxd exec on this backend (same config file and entry, without [sandbox] docker_host), in alternating rounds, and report the ratio")
	return cmd
}

// benchExecReport is what bench exec prints (--json: as is).
type benchExecReport struct {
	Backend      string `json:"backend"`
	Image        string `json:"image"`
	N            int    `json:"n"`
	BaselineN    int    `json:"baseline_n"`
	AgentVersion string `json:"agent_version"`

	// The p99s are left out with 100 samples or fewer (they would be the
	// maximum).
	ExecP50         float64 `json:"exec_p50_ms"`
	ExecP99         float64 `json:"exec_p99_ms,omitempty"`
	ExecMax         float64 `json:"exec_max_ms"`
	BaselineExecP50 float64 `json:"baseline_exec_p50_ms"`
	BaselineExecP99 float64 `json:"baseline_exec_p99_ms,omitempty"`
	BaselineExecMax float64 `json:"baseline_exec_max_ms"`
	Speedup         float64 `json:"speedup"`

	ReadSmallP50  float64 `json:"read_small_p50_ms"`
	WriteSmallP50 float64 `json:"write_small_p50_ms"`

	Copy64MiB  float64 `json:"copy_64mib_mb_per_s"`
	CopyWrite  float64 `json:"copy_write_mb_per_s"`
	CopyRead   float64 `json:"copy_read_mb_per_s"`
	AgentRSSKi int64   `json:"agent_rss_kib"`

	// With --compare: the other backend, its sbxd exec p50 measured in
	// alternating rounds with ours, and exec_p50_ms / compare_exec_p50_ms.
	CompareBackend string  `json:"compare_backend,omitempty"`
	CompareExecP50 float64 `json:"compare_exec_p50_ms,omitempty"`
	CompareRatio   float64 `json:"compare_ratio,omitempty"`
}

func (a *app) benchExec(ctx context.Context, o benchExecOptions) error {
	if o.n < 1 || o.baselineN < 1 {
		return errors.New("sbx bench exec: --n and --baseline-n must be at least 1")
	}
	if err := handOverFor(o.compare); err != nil {
		return fmt.Errorf("--compare: %w", err)
	}
	cfg, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	logf := func(format string, args ...any) {
		if !a.json {
			fmt.Fprintf(a.stderr, format+"\n", args...)
		}
	}
	session := benchSession()
	sb, spec, err := a.benchSandbox(ctx, cfg, b, o, session, logf)
	if err != nil {
		return err
	}
	defer destroy(ctx, sb)
	rep := benchExecReport{Backend: b.Name(), Image: spec.Image, N: o.n, BaselineN: o.baselineN}

	c, agent, err := a.startAgent(ctx, sb)
	if err != nil {
		return err
	}
	defer c.Close()
	rep.AgentVersion = agent.Version

	// The backend to compare with, its sandbox made from the same entry.
	var other *sbxd.Client
	if o.compare != "" {
		ocfg, ob, err := a.openCompare(ctx, cfg, o.compare)
		if err != nil {
			return err
		}
		defer ob.Close()
		osb, _, err := a.benchSandbox(ctx, ocfg, ob, o, session, logf)
		if err != nil {
			return fmt.Errorf("--compare %s: %w", o.compare, err)
		}
		defer destroy(ctx, osb)
		if other, _, err = a.startAgent(ctx, osb); err != nil {
			return fmt.Errorf("--compare %s: %w", o.compare, err)
		}
		defer other.Close()
		rep.CompareBackend = ob.Name()
		logf("bench: %d execs through sbxd on %s and on %s and %d plain ones, in alternating rounds", o.n, b.Name(), ob.Name(), o.baselineN)
	} else {
		logf("bench: %d execs through sbxd and %d plain ones, in alternating rounds", o.n, o.baselineN)
	}
	// Warm up, then measure every path in alternating rounds, with the
	// agent running, so that all see the same load on this machine.
	paths := map[execPath]backend.Sandbox{pathSbxd: c, pathPlain: sb}
	if other != nil {
		paths[pathCompare] = other
	}
	for _, w := range []struct {
		p execPath
		n int
	}{{pathPlain, min(3, o.baselineN)}, {pathSbxd, min(50, o.n)}, {pathCompare, min(50, o.n)}} {
		if s := paths[w.p]; s != nil {
			if _, err := timeExec(ctx, s, w.n); err != nil {
				return fmt.Errorf("%s exec: %w", w.p, err)
			}
		}
	}
	samples := map[execPath][]float64{}
	for _, batch := range execSchedule(o.n, o.baselineN, other != nil) {
		xs, err := timeExec(ctx, paths[batch.path], batch.n)
		if err != nil {
			return fmt.Errorf("%s exec: %w", batch.path, err)
		}
		samples[batch.path] = append(samples[batch.path], xs...)
	}
	fp, bp := percentilesOf(samples[pathSbxd]), percentilesOf(samples[pathPlain])
	rep.ExecP50, rep.ExecP99, rep.ExecMax = fp.P50, fp.P99, fp.Max
	rep.BaselineExecP50, rep.BaselineExecP99, rep.BaselineExecMax = bp.P50, bp.P99, bp.Max
	if rep.ExecP50 > 0 {
		rep.Speedup = rep.BaselineExecP50 / rep.ExecP50
	}
	if other != nil {
		rep.CompareExecP50 = percentilesOf(samples[pathCompare]).P50
		if rep.CompareExecP50 > 0 {
			rep.CompareRatio = rep.ExecP50 / rep.CompareExecP50
		}
	}

	logf("bench: %d small file writes and reads through fileops", o.n)
	if err := benchSmallFiles(ctx, c, o.n, &rep); err != nil {
		return err
	}
	logf("bench: copying 64 MiB in and out")
	if err := benchCopy(ctx, c, &rep); err != nil {
		return err
	}
	if rss, err := agentRSS(ctx, c, agent.PID); err == nil {
		rep.AgentRSSKi = rss
	} else {
		a.logger.Warn("reading the agent's memory failed", "err", err)
	}

	if a.json {
		return printJSON(a.stdout, rep)
	}
	w := a.stdout
	fmt.Fprintf(w, "backend %s, image %s, agent %s\n", rep.Backend, rep.Image, rep.AgentVersion)
	t := newTable(w, "OPERATION", "N", "P50", "P99", "MAX")
	t.row("exec true (sbxd)", strconv.Itoa(rep.N), fmt.Sprintf("%.2fms", rep.ExecP50), fp.p99Cell("%.2fms"), fmt.Sprintf("%.2fms", rep.ExecMax))
	t.row("exec true (plain)", strconv.Itoa(rep.BaselineN), fmt.Sprintf("%.2fms", rep.BaselineExecP50), bp.p99Cell("%.2fms"), fmt.Sprintf("%.2fms", rep.BaselineExecMax))
	t.row("read 4 KiB (fileops)", strconv.Itoa(rep.N), fmt.Sprintf("%.2fms", rep.ReadSmallP50), "", "")
	t.row("write 4 KiB (fileops)", strconv.Itoa(rep.N), fmt.Sprintf("%.2fms", rep.WriteSmallP50), "", "")
	if rep.CompareBackend != "" {
		t.row("exec true (sbxd, "+rep.CompareBackend+")", strconv.Itoa(rep.N), fmt.Sprintf("%.2fms", rep.CompareExecP50), "", "")
	}
	t.flush()
	if rep.CompareBackend != "" {
		fmt.Fprintf(w, "exec p50 %.2fx %s's\n", rep.CompareRatio, rep.CompareBackend)
	}
	fmt.Fprintf(w, "speedup %.1fx; copy 64 MiB %.0f MB/s (write %.0f, read %.0f); agent RSS %d KiB\n",
		rep.Speedup, rep.Copy64MiB, rep.CopyWrite, rep.CopyRead, rep.AgentRSSKi)
	return nil
}

// openCompare opens the backend named by --compare with cfg's file. Its
// [sandbox] docker_host names where cfg's backend runs (a remote): the
// other one gets its own table's host or its default.
func (a *app) openCompare(ctx context.Context, cfg *config.Config, name string) (*config.Config, backend.Backend, error) {
	ocfg := *cfg
	ocfg.Sandbox.DockerHost, ocfg.Sandbox.DockerRemoteHost = "", ""
	if err := ocfg.SetBackend(name); err != nil {
		return nil, nil, fmt.Errorf("--compare: %w", err)
	}
	ob, err := ocfg.Open(ctx, a.logger)
	if err != nil {
		return nil, nil, fmt.Errorf("--compare %s: %w", name, err)
	}
	return &ocfg, ob, nil
}

// benchSandbox makes the benchmark's sandbox on b from the chosen entry.
func (a *app) benchSandbox(ctx context.Context, cfg *config.Config, b backend.Backend, o benchExecOptions, session string, logf func(string, ...any)) (backend.Sandbox, backend.Spec, error) {
	_, spec, err := benchSpec(cfg, o.entry, o.image, session)
	if err != nil {
		return nil, backend.Spec{}, err
	}
	logf("bench: creating a sandbox (%s, image %s)", b.Name(), spec.Image)
	sb, err := a.create(ctx, b, spec)
	return sb, spec, err
}

// startAgent starts sbxd in sb.
func (a *app) startAgent(ctx context.Context, sb backend.Sandbox, opts ...sbxd.Option) (*sbxd.Client, sbxd.AgentInfo, error) {
	c, err := sbxd.Wrap(ctx, sb, append([]sbxd.Option{sbxd.WithLogger(a.logger)}, opts...)...)
	if err != nil {
		return nil, sbxd.AgentInfo{}, err
	}
	agent, err := c.Agent(ctx)
	if err != nil {
		c.Close()
		return nil, sbxd.AgentInfo{}, fmt.Errorf("the sbxd agent did not start in the sandbox: %w", err)
	}
	return c, agent, nil
}

// execPath is one way bench exec runs true.
type execPath string

const (
	pathSbxd    execPath = "sbxd"
	pathPlain   execPath = "plain"
	pathCompare execPath = "compare"
)

// execBatch is n measured execs of true on one path.
type execBatch struct {
	path execPath
	n    int
}

// execRound is how many execs through sbxd a round of bench exec holds.
const execRound = 25

// execSchedule orders bench exec's measured execs: rounds of execRound
// through sbxd, each followed by the plain path's share of baselineN (the
// shares spread as evenly as the counts allow) and, with a backend to
// compare, as many as this round's through sbxd on it. Every path thus
// sees the same load on this machine, from start to end.
func execSchedule(n, baselineN int, compare bool) []execBatch {
	rounds := (n + execRound - 1) / execRound
	var out []execBatch
	for r := range rounds {
		k := min(execRound, n-r*execRound)
		out = append(out, execBatch{pathSbxd, k})
		if share := baselineN*(r+1)/rounds - baselineN*r/rounds; share > 0 {
			out = append(out, execBatch{pathPlain, share})
		}
		if compare {
			out = append(out, execBatch{pathCompare, k})
		}
	}
	return out
}

var trueReq = backend.ExecRequest{Cmd: []string{"true"}}

// timeExec runs true n times in s and returns each call's duration in ms.
func timeExec(ctx context.Context, s backend.Sandbox, n int) ([]float64, error) {
	return timeN(n, func() error {
		res, err := s.Exec(ctx, trueReq)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("true exited %d: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))
		}
		return err
	})
}

// timeN calls fn n times and returns each call's duration in ms.
func timeN(n int, fn func() error) ([]float64, error) {
	out := make([]float64, 0, n)
	for range n {
		t0 := time.Now()
		if err := fn(); err != nil {
			return nil, err
		}
		out = append(out, ms(time.Since(t0)))
	}
	return out, nil
}

// benchSmallFiles writes n new 4 KiB text files with fileops.WriteFile and
// reads each back with fileops.ReadFile, in a directory removed afterwards.
func benchSmallFiles(ctx context.Context, c *sbxd.Client, n int, rep *benchExecReport) error {
	dir := "/tmp/sbx-bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	defer c.Remove(context.WithoutCancel(ctx), dir, true)
	var sb strings.Builder
	for i := 0; sb.Len() < 4096-64; i++ {
		fmt.Fprintf(&sb, "line %d of a small text file for the benchmark\n", i)
	}
	content := sb.String() + strings.Repeat("x", 4095-sb.Len()) + "\n"
	tools := fileops.New(c, fileops.Options{})
	name := func(i int) string { return fmt.Sprintf("%s/f%d.txt", dir, i) }
	i := 0
	writes, err := timeN(n, func() error {
		i++
		_, err := tools.WriteFile(ctx, name(i), content)
		return err
	})
	if err != nil {
		return fmt.Errorf("fileops write_file: %w", err)
	}
	i = 0
	reads, err := timeN(n, func() error {
		i++
		out, err := tools.ReadFile(ctx, name(i), 0, 0)
		if err == nil && !strings.Contains(out, "line 0 of") {
			err = fmt.Errorf("read_file %s: unexpected answer %.80q", name(i), out)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("fileops read_file: %w", err)
	}
	rep.WriteSmallP50, rep.ReadSmallP50 = percentilesOf(writes).P50, percentilesOf(reads).P50
	return nil
}

// benchCopy writes 64 MiB of pseudo-random bytes from memory into the
// sandbox (as sbx cp of a file would), reads them back and checks them.
func benchCopy(ctx context.Context, c *sbxd.Client, rep *benchExecReport) error {
	const size = 64 << 20
	name := "/tmp/sbx-bench-copy-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	defer c.Remove(context.WithoutCancel(ctx), name, false)
	data := make([]byte, size)
	x := uint64(0x9e3779b97f4a7c15)
	for i := 0; i < size; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(data[i:], x)
	}
	want := crc32.Checksum(data, castagnoli)
	t0 := time.Now()
	if err := c.WriteFile(ctx, name, bytes.NewReader(data), 0o600); err != nil {
		return fmt.Errorf("copy in: %w", err)
	}
	tw := time.Since(t0)
	t1 := time.Now()
	rc, err := c.ReadFile(ctx, name)
	if err != nil {
		return fmt.Errorf("copy out: %w", err)
	}
	h := crc32.New(castagnoli)
	got, err := io.Copy(h, bufio.NewReaderSize(rc, 1<<20))
	rc.Close()
	if err != nil {
		return fmt.Errorf("copy out: %w", err)
	}
	tr := time.Since(t1)
	if got != size || h.Sum32() != want {
		return fmt.Errorf("copy out: read back %d bytes (crc %08x), wrote %d (crc %08x)", got, h.Sum32(), size, want)
	}
	mb := float64(size) / 1e6
	rep.CopyWrite = mb / tw.Seconds()
	rep.CopyRead = mb / tr.Seconds()
	rep.Copy64MiB = 2 * mb / (tw + tr).Seconds()
	return nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// agentRSS reads the agent's resident set (VmRSS, KiB) from /proc inside
// the sandbox.
func agentRSS(ctx context.Context, c *sbxd.Client, pid int) (int64, error) {
	rc, err := c.ReadFile(ctx, "/proc/"+strconv.Itoa(pid)+"/status")
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, errors.New("no VmRSS in the agent's /proc status")
}
