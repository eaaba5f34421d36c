package native

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/egress"
	"github.com/sandboxkit/sandboxkit/internal/egressctl"
	"github.com/sandboxkit/sandboxkit/internal/egresshost"
	"github.com/sandboxkit/sandboxkit/internal/owner"
	"github.com/sandboxkit/sandboxkit/internal/syncbuf"
)

// Egress policies (Spec.Egress) on Docker engines.
//
// A sandbox with a policy has a companion container, its enforcer, that
// owns the network namespace the sandbox's container joins (network mode
// container:NAME). The enforcer, `sbxd egress --in-netns` from the sbxd
// volume, runs as root with CAP_NET_ADMIN alone, in its own PID and mount
// namespaces; before it says it is ready (the sandbox's container starts
// only then) it has loaded the namespace's nftables rules: DNS to its
// resolver and TCP to its proxy on loopback, nothing else out but its own
// marked sockets (package egressctl). The sandbox's container drops
// CAP_NET_RAW and CAP_NET_ADMIN (either could set the mark), so it can
// neither change the rules nor see, signal or reach the controls of the
// enforcer (a unix socket in the enforcer's file system, reached by an
// exec in its container: SetEgress and EgressStatus). Everything goes
// through the Engine API, so remotedocker enforces the same way over SSH.
//
// The enforcer is made while the sandbox's container is (which starts only
// once the enforcer is ready) and removed before it: an enforcer whose
// sandbox is gone is a leftover once its creator (LabelCreator) has died
// or a minute has passed, and PruneCaches removes it. Published ports, the host
// name and extra hosts belong to the namespace's owner, so they move to
// the enforcer's container.
const (
	// labelEgress, on a sandbox's container: its enforcer's container name.
	labelEgress = "sandboxkit.native.egress"
	// labelEgressFor, on an enforcer's container: its sandbox's ID.
	labelEgressFor = "sandboxkit.native.egress-for"
	// egressState is the enforcer's folder in its own container.
	egressState = "/.sbx-egress"
)

// enforcerName is the container name of sandbox id's enforcer (sandboxes'
// names start with "sbx-").
func enforcerName(id string) string { return "sbxe-" + id }

// checkEgress refuses specs whose policy a Docker engine cannot hold the
// sandbox to.
func (b *Backend) checkEgress(spec backend.Spec) error {
	if spec.Egress == nil {
		return nil
	}
	if _, err := egress.NewPolicy(spec.Egress.Default, spec.Egress.Allow, spec.Egress.Deny); err != nil {
		return fmt.Errorf("%w: egress: %v", backend.ErrInvalidConfig, err)
	}
	n := spec.Network
	switch {
	case n == "host", n == "none", strings.HasPrefix(n, "container:"):
		return fmt.Errorf("%w: egress and network = %q exclude each other: the policy's enforcer needs the sandbox on a network of its own (remove one)", backend.ErrInvalidConfig, n)
	case spec.Privileged:
		return fmt.Errorf("%w: egress and privileged exclude each other: a privileged sandbox has CAP_NET_ADMIN", backend.ErrInvalidConfig)
	case spec.Existing != "":
		return fmt.Errorf("%w: egress: an existing container (existing = ...) was made without an enforcer; create the sandbox instead", backend.ErrInvalidConfig)
	}
	for _, c := range spec.CapAdd {
		switch strings.TrimPrefix(strings.ToUpper(c), "CAP_") {
		case "NET_ADMIN", "NET_RAW", "ALL":
			return fmt.Errorf("%w: egress: cap_add %s would let the sandbox mark its packets past the enforcer or manage its network; remove it", backend.ErrInvalidConfig, c)
		}
	}
	return nil
}

// egressUpstream is the enforcer's DNS server flag ("": the enforcer's
// container's resolv.conf).
func (b *Backend) egressUpstream() []string {
	if b.cfg.EgressDNS == "" {
		return nil
	}
	ap, _ := egressctl.DNSServer(b.cfg.EgressDNS) // checked by New
	return []string{"--upstream", ap}
}

// joinEnforcer makes the sandbox's container (cfg, hc) join the network
// of sandbox id's enforcer and returns the enforcer's container config:
// the network, published ports, host name and extra hosts move to it.
func (b *Backend) joinEnforcer(ctx context.Context, spec backend.Spec, id string, cfg *container.Config, hc *container.HostConfig) (*container.Config, *container.HostConfig, error) {
	policy, err := json.Marshal(spec.Egress)
	if err != nil {
		return nil, nil, err
	}
	upstream := b.egressUpstream()
	if host := egressctl.HostAddrsFlag(b.engineHostAddrs(ctx)); host != "" {
		upstream = append(upstream, "--host-addrs", host)
	}
	name := enforcerName(id)
	entry := []string{sbxdPath, "egress", "--in-netns", "--state", egressState,
		"--proxy-port", strconv.Itoa(egressctl.ProxyPort), "--dns-port", strconv.Itoa(egressctl.DNSPort),
		"--policy-json", string(policy), "--ready-fd", "1"}
	ecfg := &container.Config{
		Image:        cfg.Image,
		Entrypoint:   append(entry, upstream...),
		Cmd:          []string{},
		User:         "0:0",
		WorkingDir:   "/",
		Hostname:     cfg.Hostname,
		ExposedPorts: cfg.ExposedPorts,
		AttachStdout: true,
		AttachStderr: true,
		Labels:       map[string]string{},
	}
	// The entry's own labels (not the pool's: pool code reads those off
	// containers as members).
	for k, v := range spec.Labels {
		if k != backend.LabelPool && k != backend.LabelPoolState {
			ecfg.Labels[k] = v
		}
	}
	ecfg.Labels[backend.LabelBackend], ecfg.Labels[labelEgressFor] = Name, id
	ecfg.Labels[backend.LabelCreator] = owner.Self()
	if s := spec.Session; s != "" {
		ecfg.Labels[backend.LabelSession] = s
	}
	pids := int64(64)
	ehc := &container.HostConfig{
		NetworkMode:  hc.NetworkMode,
		PortBindings: hc.PortBindings,
		ExtraHosts:   hc.ExtraHosts,
		CapDrop:      []string{"ALL"},
		CapAdd:       []string{"NET_ADMIN"},
		SecurityOpt:  []string{"no-new-privileges:true"},
		// The engine's default runtime: the enforcer is this project's
		// code and must program its kernel's netfilter, which a gVisor
		// sandbox's own kernel lacks; the sandbox, whatever its runtime,
		// joins the enforcer's network namespace.
		Resources: container.Resources{PidsLimit: &pids},
	}
	cfg.Hostname, cfg.ExposedPorts = "", nil
	cfg.Labels[labelEgress] = name
	hc.NetworkMode = container.NetworkMode("container:" + name)
	hc.PortBindings, hc.ExtraHosts = nil, nil
	for _, c := range []string{"NET_RAW", "NET_ADMIN"} {
		if !slices.Contains(hc.CapDrop, c) {
			hc.CapDrop = append(hc.CapDrop, c)
		}
	}
	return ecfg, ehc, nil
}

// runEnforcer creates and starts an enforcer container named name and
// waits until its rules are loaded and it serves; it returns the
// container's ID. On error nothing of it is left.
func (b *Backend) runEnforcer(ctx context.Context, spec backend.Spec, name string, cfg *container.Config, hc *container.HostConfig, inject func(ctx context.Context, cid string) error) (_ string, err error) {
	var created container.CreateResponse
	// Not cut short by ctx: a create cancelled while the engine makes the
	// container (a spare's start when the backend closes) would leave it
	// there, never started, without our knowing its ID. The steps after
	// it honour ctx, and what fails then is removed.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	if b.cfg.Ports == PortsLoopback && len(spec.Ports) > 0 {
		// The enforcer publishes the ports: on the session's address.
		created, err = b.createOnLoopback(cctx, spec, cfg.Labels[labelEgressFor], cfg, hc, name)
	} else {
		created, err = b.cli.ContainerCreate(cctx, cfg, hc, networkingConfig(spec), platformOf(spec), name)
	}
	cancel()
	if err != nil {
		return "", fmt.Errorf("egress enforcer: %w", b.explainCreate(err))
	}
	defer func() {
		if err != nil {
			rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			b.cli.ContainerRemove(rmCtx, created.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		}
	}()
	if err := inject(ctx, created.ID); err != nil {
		return "", err
	}
	// Attached before the start, so that its first line is not missed.
	hr, err := b.cli.ContainerAttach(ctx, created.ID, container.AttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		return "", fmt.Errorf("egress enforcer: attaching: %w", b.translate(err))
	}
	defer hr.Close()
	if err := b.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return "", fmt.Errorf("egress enforcer: %w", b.explainCreate(err))
	}
	pr, pw := io.Pipe()
	// Read here on failure while the copy may still write to it.
	var stderr syncbuf.Buffer
	go func() {
		_, err := stdcopy.StdCopy(pw, &stderr, hr.Reader)
		pw.CloseWithError(err)
	}()
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(pr).ReadString('\n')
		if strings.HasPrefix(line, "ready ") {
			ready <- nil
			return
		}
		ready <- fmt.Errorf("it ended before it was ready (%v)", err)
	}()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case err = <-ready:
	case <-timer.C:
		err = errors.New("it was not ready within 30 s")
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		hr.Close()
		pr.Close()
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return "", fmt.Errorf("egress enforcer: %w", err)
	}
	return created.ID, nil
}

// removeEnforcer removes the enforcer container name; a missing one is no
// error.
func (b *Backend) removeEnforcer(ctx context.Context, name string) error {
	err := b.translate(b.cli.ContainerRemove(ctx, name, container.RemoveOptions{Force: true, RemoveVolumes: true}))
	if err != nil && !errors.Is(err, backend.ErrNotFound) && !strings.Contains(err.Error(), "already in progress") {
		return fmt.Errorf("removing the egress enforcer %s: %w", name, err)
	}
	return nil
}

// enforcerGrace is how long an enforcer whose sandbox's container does
// not exist is left alone while its creator lives (Create makes the two at
// once).
var enforcerGrace = time.Minute

// pruneEnforcers removes the enforcers whose sandbox's container is gone,
// once their creator is dead or enforcerGrace has passed.
func (b *Backend) pruneEnforcers(ctx context.Context, dryRun bool) ([]string, error) {
	// Enforcers first: the sandbox of one listed here and still being
	// made is then in the second listing, or its creator is alive.
	ef := filters.NewArgs(filters.Arg("label", backend.LabelBackend+"="+Name), filters.Arg("label", labelEgressFor))
	enforcers, err := b.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: ef})
	if err != nil || len(enforcers) == 0 {
		return nil, b.translate(err)
	}
	sf := filters.NewArgs(filters.Arg("label", backend.LabelBackend+"="+Name), filters.Arg("label", labelEgress))
	sandboxes, err := b.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: sf})
	if err != nil {
		return nil, b.translate(err)
	}
	live := map[string]bool{}
	for _, c := range sandboxes {
		live[c.Labels[labelEgress]] = true
	}
	var pruned []string
	for _, c := range enforcers {
		name := strings.TrimPrefix(firstName(c.Names), "/")
		if !matchLabels(c.Labels, ef) || live[name] {
			continue
		}
		alive, known := owner.Alive(c.Labels[backend.LabelCreator])
		young := time.Since(time.Unix(c.Created, 0)) < enforcerGrace
		// A spare not claimed is kept while its creator lives; any other
		// enforcer without a sandbox, for enforcerGrace (a claimed spare
		// is renamed before its sandbox's container is made).
		spare := strings.HasPrefix(name, sparePrefix) && c.Labels[labelEgressSpare] != ""
		if alive && spare || (alive || !known) && young {
			continue
		}
		if !dryRun {
			if err := b.removeEnforcer(ctx, c.ID); err != nil {
				return pruned, err
			}
		}
		pruned = append(pruned, "egress enforcer "+name)
	}
	return pruned, nil
}

// SetEgress replaces sandbox id's policy (backend.EgressController).
func (b *Backend) SetEgress(ctx context.Context, id string, policy backend.Egress) error {
	name, err := b.enforcerOf(ctx, "set egress", id)
	if err != nil {
		return err
	}
	return b.opErr("set egress", id, egressctl.SetPolicyVia(ctx, b.runIn(name), sbxdPath, egressState, egressctl.Policy(policy)))
}

// EgressStatus returns sandbox id's policy and latest denials
// (backend.EgressController).
func (b *Backend) EgressStatus(ctx context.Context, id string) (backend.EgressStatus, error) {
	name, err := b.enforcerOf(ctx, "egress status", id)
	if err != nil {
		return backend.EgressStatus{}, err
	}
	st, err := egressctl.StatusVia(ctx, b.runIn(name), sbxdPath, egressState)
	return egresshost.Status(st), b.opErr("egress status", id, err)
}

// runIn runs commands in container cid (execCapture).
func (b *Backend) runIn(cid string) egressctl.RunFunc {
	return func(ctx context.Context, argv []string, stdin []byte) ([]byte, []byte, int, error) {
		return b.execCapture(ctx, cid, argv, stdin)
	}
}

// enforcerOf returns the enforcer container of sandbox id, which must
// have a policy.
func (b *Backend) enforcerOf(ctx context.Context, op, id string) (string, error) {
	c, err := b.find(ctx, id)
	if err != nil {
		return "", b.opErr(op, id, err)
	}
	name := ""
	if c.Config != nil {
		name = c.Config.Labels[labelEgress]
	}
	if name == "" {
		return "", b.opErr(op, id, fmt.Errorf("%w: sandbox %s was made without an egress policy, so its network has no enforcer (create it with one: egress = {...} in its entry)", errors.ErrUnsupported, id))
	}
	return name, nil
}

// execCapture runs argv as root in container cid with stdin, and returns
// its output and exit code.
func (b *Backend) execCapture(ctx context.Context, cid string, argv []string, stdin []byte) (stdout, stderr []byte, code int, err error) {
	created, err := b.cli.ContainerExecCreate(ctx, cid, container.ExecOptions{
		Cmd: argv, User: "0", AttachStdin: stdin != nil, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return nil, nil, 0, b.translate(err)
	}
	hr, err := b.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, nil, 0, b.translate(err)
	}
	defer hr.Close()
	if stdin != nil {
		if _, err := hr.Conn.Write(stdin); err != nil {
			return nil, nil, 0, err
		}
		if err := hr.CloseWrite(); err != nil {
			return nil, nil, 0, err
		}
	}
	var out, errOut bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &errOut, io.LimitReader(hr.Reader, 4<<20)); err != nil {
		return nil, nil, 0, err
	}
	code, err = b.exitCode(ctx, created.ID)
	return out.Bytes(), errOut.Bytes(), code, err
}
