package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/client"
	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/backends/remotedocker"
	"github.com/sandboxkit/sandboxkit/config"
)

type benchCLIOptions struct {
	n            int
	image, entry string
}

func (a *app) benchCLICmd() *cobra.Command {
	var o benchCLIOptions
	cmd := &cobra.Command{
		Use:   "cli",
		Short: "Time whole sbx run and sbx exec processes against docker run and docker exec",
		Long: `Cli times sbx as a user at a shell meets it: every sample is a whole process
of this sbx binary, started with the same config file and backend (--config
and --backend passed explicitly), from fork and exec through loading the
config, opening the backend, the command and its cleanup to the exit:

  run   sbx run -- true: a sandbox made from the entry, "true" run in it,
        the sandbox removed; against docker run --rm IMAGE true.
  exec  sbx exec ID -- true in one sandbox kept for the whole bench;
        against docker exec CONTAINER true in that sandbox's container.

The docker baselines run on the backends that are a Docker engine (native,
remotedocker), with the docker CLI pointed at the same engine (docker -H
HOST) and the same image. Elsewhere, or when the docker CLI is missing or
cannot reach the engine the way the backend does, only sbx's figures are
reported and baseline_note says why.

After one unmeasured warm-up of each, each pair runs --n times in
alternating order (sbx first in one iteration, the baseline first in the
next), so that both see the same load on this machine. It reports per
command the median (p50) in ms, the p90 from 11 samples on, and the ratio
of sbx's median to the baseline's (below 1: sbx is faster). A command that
fails ends the bench with its stderr. The kept sandbox is removed at the
end, also after an error or Ctrl-C.`,
		Example: `  sbx bench cli --backend native
  sbx bench cli --backend local --n 30 --json`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.n < 1 {
				return usageError(cmd, "--n must be at least 1")
			}
			return a.benchCLI(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.n, "n", 15, "measured runs of each command (and of its baseline)")
	f.StringVar(&o.image, "image", "", "image to use instead of the entry's")
	f.StringVar(&o.entry, "sandbox", "", `config entry to make the sandboxes from (default "main", or the only entry)`)
	return cmd
}

// benchCLIReport is what bench cli prints (--json: as is).
type benchCLIReport struct {
	Backend string `json:"backend"`
	Image   string `json:"image,omitempty"`
	N       int    `json:"n"`
	// Session is the kept sandbox's (sbx exec's) session.
	Session string `json:"session"`
	// BaselineNote says why a command has no docker baseline.
	BaselineNote string       `json:"baseline_note,omitempty"`
	Commands     []cliCommand `json:"commands"`
}

// cliCommand is one command's figures, in ms per whole process.
type cliCommand struct {
	Name         string      `json:"name"`
	SbxArgv      []string    `json:"sbx_argv"`
	SbxMs        percentiles `json:"sbx_ms"`
	BaselineArgv []string    `json:"baseline_argv,omitempty"`
	BaselineMs   percentiles `json:"baseline_ms,omitzero"`
	// Ratio is SbxMs.P50 / BaselineMs.P50: below 1, sbx is faster.
	Ratio float64 `json:"ratio,omitempty"`
}

func (a *app) benchCLI(ctx context.Context, o benchCLIOptions) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("sbx bench cli: finding the sbx binary: %w", err)
	}
	cfg, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	session := benchSession()
	sb, spec, err := a.benchSandbox(ctx, cfg, b, benchExecOptions{image: o.image, entry: o.entry}, session, a.benchLog)
	if err != nil {
		return err
	}
	// Removed after Ctrl-C and errors too.
	defer func() {
		if err := destroy(ctx, sb); err != nil {
			a.printError(fmt.Errorf("removing sandbox %s: %w", sb.ID(), err))
		}
	}()
	image := spec.Image
	if image == "" { // built from a Dockerfile: the tag the backend made
		if info, err := sb.Info(ctx); err == nil {
			image = info.Image
		}
	}

	// The children get this sbx's config file and backend explicitly.
	sbxArgv := []string{self}
	if cfg.Path != "" {
		sbxArgv = append(sbxArgv, "--config", cfg.Path)
	}
	sbxArgv = append(sbxArgv, "--backend", b.Name())
	runArgv := append(sbxArgv[:len(sbxArgv):len(sbxArgv)], "run")
	if o.entry != "" {
		runArgv = append(runArgv, "--sandbox", o.entry)
	}
	if o.image != "" {
		runArgv = append(runArgv, "--image", o.image)
	}
	runArgv = append(runArgv, "--", "true")
	execArgv := append(sbxArgv[:len(sbxArgv):len(sbxArgv)], "exec", sb.ID(), "--", "true")
	pairs := []*cliPair{{name: "run", argv: [2][]string{runArgv}}, {name: "exec", argv: [2][]string{execArgv}}}

	rep := benchCLIReport{Backend: b.Name(), Image: image, N: o.n, Session: session}
	docker, note := dockerCLI(cfg, b.Name())
	cid, hasCID := backend.As[interface{ ContainerID() string }](sb)
	switch {
	case docker == nil:
		rep.BaselineNote = note
	case image == "":
		rep.BaselineNote = "the sandbox's image is unknown, so docker run has none to run"
	case !hasCID:
		rep.BaselineNote = "the sandbox has no container ID for docker exec"
	default:
		pairs[0].argv[1] = append(docker[:len(docker):len(docker)], "run", "--rm", image, "true")
		pairs[1].argv[1] = append(docker[:len(docker):len(docker)], "exec", cid.ContainerID(), "true")
	}

	// The children's stderr goes to a file: a pipe would make the clock
	// wait for whatever a child left holding it.
	errFile, err := os.CreateTemp("", "sbx-bench-cli-*.stderr")
	if err != nil {
		return err
	}
	defer os.Remove(errFile.Name())
	defer errFile.Close()

	if rep.BaselineNote != "" {
		a.benchLog("bench cli: no docker baseline: %s", rep.BaselineNote)
	}
	// i == -1 is the unmeasured warm-up. Odd iterations run the baseline
	// first.
	for i := -1; i < o.n; i++ {
		for _, p := range pairs {
			if i < 0 {
				a.benchLog("bench cli: %s warm-up", p.name)
			} else {
				a.benchLog("bench cli: %s %d/%d", p.name, i+1, o.n)
			}
			order := []int{0, 1}
			if i%2 != 0 {
				order = []int{1, 0}
			}
			for _, k := range order {
				if p.argv[k] == nil {
					continue
				}
				took, err := timeProcess(ctx, p.argv[k], errFile)
				if err != nil {
					return err
				}
				if i >= 0 {
					p.ms[k] = append(p.ms[k], took)
				}
			}
		}
	}

	for _, p := range pairs {
		c := cliCommand{Name: p.name, SbxArgv: p.argv[0], SbxMs: percentilesOf(p.ms[0]), BaselineArgv: p.argv[1], BaselineMs: percentilesOf(p.ms[1])}
		if c.BaselineMs.P50 > 0 {
			c.Ratio = math.Round(c.SbxMs.P50/c.BaselineMs.P50*1000) / 1000
		}
		rep.Commands = append(rep.Commands, c)
	}
	return a.benchResult(ctx, rep, func() { printBenchCLI(a, rep) }, false)
}

// cliPair is a command bench cli measures: sbx's argv and samples ([0]),
// and the baseline's ([1]; no argv: none).
type cliPair struct {
	name string
	argv [2][]string
	ms   [2][]float64
}

// timeProcess runs argv to its end, with stdout discarded and stderr in
// errFile, and returns how long it took in ms. A non-zero exit is an error
// naming the command and quoting its stderr. When ctx ends the process is
// interrupted, as Ctrl-C would, so that sbx run removes its sandbox. It
// runs in a process group of its own: a Ctrl-C at the terminal reaches it
// only that way, once (a second SIGINT stops sbx at once, before its
// cleanup).
func timeProcess(ctx context.Context, argv []string, errFile *os.File) (float64, error) {
	if err := errFile.Truncate(0); err != nil {
		return 0, err
	}
	if _, err := errFile.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stderr = errFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = cleanupTimeout + 10*time.Second
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err != nil {
		stderr, _ := os.ReadFile(errFile.Name())
		return 0, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(stderr)))
	}
	return ms(took), nil
}

// dockerCLI returns the docker CLI's argv reaching the engine the backend
// named runs on ("docker -H HOST"), or nil and why there is none. The host
// is the one the backend uses: its table's docker_host, else [sandbox]
// docker_host, else DOCKER_HOST, else (native) the local socket. TLS
// settings come from the same environment for both.
func dockerCLI(cfg *config.Config, name string) ([]string, string) {
	var host string
	switch name {
	case native.Name:
		c, _ := cfg.BackendConfig(native.Name).(*native.Config)
		if c == nil {
			c = &native.Config{}
		}
		host = cmp.Or(c.Host, cfg.Sandbox.DockerHost, os.Getenv("DOCKER_HOST"), client.DefaultDockerHost)
	case remotedocker.Name:
		c, _ := cfg.BackendConfig(remotedocker.Name).(*remotedocker.Config)
		if c == nil {
			c = &remotedocker.Config{}
		}
		host = cmp.Or(c.Host, cfg.Sandbox.DockerHost, os.Getenv("DOCKER_HOST"))
		if host == "" {
			return nil, "the remotedocker backend's engine is not set (docker_host, DOCKER_HOST)"
		}
		if strings.HasPrefix(host, "ssh://") {
			// The docker CLI runs ssh HOST with ~/.ssh/config and the
			// engine's default socket there, and follows none of these.
			var set []string
			for _, s := range []struct {
				key string
				on  bool
			}{
				{"remote_socket", c.RemoteSocket != "" && c.RemoteSocket != remotedocker.DefaultRemoteSocket},
				{"identity_file", c.IdentityFile != ""},
				{"known_hosts", c.KnownHosts != ""},
				{"ssh_config", c.SSHConfig != ""},
				{"insecure_ignore_host_key", c.InsecureIgnoreHostKey},
			} {
				if s.on {
					set = append(set, s.key)
				}
			}
			if len(set) > 0 {
				return nil, fmt.Sprintf("[sandbox.remotedocker] sets %s, which the docker CLI's ssh:// connection would not follow", strings.Join(set, ", "))
			}
			if _, err := exec.LookPath("ssh"); err != nil {
				return nil, "no ssh on PATH for the docker CLI to reach " + host
			}
		}
	default:
		return nil, fmt.Sprintf("the %s backend runs no Docker engine to compare with", name)
	}
	docker, err := exec.LookPath("docker")
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return nil, "no docker CLI on PATH"
		}
		return nil, "docker CLI: " + err.Error()
	}
	return []string{docker, "-H", host}, ""
}

func printBenchCLI(a *app, rep benchCLIReport) {
	w := a.stdout
	fmt.Fprintf(w, "backend %s, image %s: %d runs of each, alternating, in ms per whole process\n", rep.Backend, orDash(rep.Image), rep.N)
	t := newTable(w, "COMMAND", "SBX P50", "P90", "BASELINE P50", "P90", "SBX/BASELINE")
	for _, c := range rep.Commands {
		base, baseP90, ratio := "-", "-", "-"
		if c.BaselineArgv != nil {
			base, baseP90, ratio = fmt.Sprintf("%.1f", c.BaselineMs.P50), c.BaselineMs.p90Cell("%.1f"), fmt.Sprintf("%.2f", c.Ratio)
		}
		t.row(c.Name, fmt.Sprintf("%.1f", c.SbxMs.P50), c.SbxMs.p90Cell("%.1f"), base, baseP90, ratio)
	}
	t.flush()
	for _, c := range rep.Commands {
		line := fmt.Sprintf("%s: %s", c.Name, shellArgv(c.SbxArgv))
		if c.BaselineArgv != nil {
			line += "  vs  " + shellArgv(c.BaselineArgv)
		}
		fmt.Fprintln(w, line)
	}
	if rep.BaselineNote != "" {
		fmt.Fprintf(w, "no docker baseline: %s\n", rep.BaselineNote)
	} else {
		fmt.Fprintln(w, "ratio below 1: sbx is faster")
	}
}

// shellArgv shows argv with its program's base name.
func shellArgv(argv []string) string {
	return strings.Join(append([]string{filepath.Base(argv[0])}, argv[1:]...), " ")
}
