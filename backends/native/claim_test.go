package native_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/volume"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// What the native backend keeps for a claim (see claim.go): a volume
// named claimPrefix+ID whose labels are the claimed sandbox's, plus these.
const (
	claimPrefix     = "sbx-claim-"
	labelClaim      = "sandboxkit.native.claim"
	labelClaimNonce = "sandboxkit.native.claim.nonce"
	keeper          = "keeper-host:1:1"
)

// member creates a ready member of a pool of its own, owned by keeper.
func member(t *testing.T, b *native.Backend) (backend.Sandbox, string) {
	t.Helper()
	pool := "test-pool-" + testRun + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	s := spec("member", dockertest.BusyboxImage)
	s.Labels[backend.LabelPool] = pool
	s.Labels[backend.LabelPoolState] = backend.PoolReady
	s.Owner = keeper
	return create(t, b, s), pool
}

func readyMembers(t *testing.T, b *native.Backend, pool string) []backend.Info {
	t.Helper()
	infos, err := b.List(t.Context(), backend.Filter{Labels: map[string]string{backend.LabelPool: pool, backend.LabelPoolState: backend.PoolReady}})
	require.NoError(t, err)
	return infos
}

// A claimed member whose record was lost (docker volume prune) stays
// claimed, by its container's name: it reads as claimed with the keeper as
// owner, is no ready member, and cannot be claimed again.
func TestClaimRecordLost(t *testing.T) {
	t.Parallel()
	b := newBackend(t, dockertest.BusyboxImage)
	cli := dockertest.Client(t)
	ctx := t.Context()
	sb, pool := member(t, b)
	_, err := b.Claim(ctx, sb.ID(), backend.Claim{Session: "task", TTL: time.Hour})
	require.NoError(t, err)
	// The rename follows the record in the background: the record is lost
	// after it.
	cid := sb.(interface{ ContainerID() string }).ContainerID()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := cli.ContainerInspect(ctx, cid)
		require.NoError(t, err)
		if strings.HasSuffix(c.Name, "-claimed") {
			break
		}
		require.True(t, time.Now().Before(deadline), "the claim's rename did not happen in 30 s")
		time.Sleep(10 * time.Millisecond) // polls a condition
	}
	require.NoError(t, cli.VolumeRemove(ctx, claimPrefix+sb.ID(), false))

	info, err := sb.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, backend.PoolClaimed, info.Labels[backend.LabelPoolState])
	assert.Equal(t, "lost", info.Labels[labelClaim])
	assert.Equal(t, keeper, info.Owner, "the keeper stays the owner, so gc reaps it once the keeper is gone")
	assert.Empty(t, readyMembers(t, b, pool))
	_, err = b.Claim(ctx, sb.ID(), backend.Claim{Session: "second"})
	assert.ErrorIs(t, err, backend.ErrClaimed)
	_, err = cli.VolumeInspect(ctx, claimPrefix+sb.ID())
	assert.Error(t, err, "a refused claim left a record")
}

// A claimer that dies after making the record and before the rename
// leaves a complete claim: the member reads as claimed by it, and is not
// claimed again. Destroy removes the record with the container.
func TestClaimRecordWithoutRename(t *testing.T) {
	t.Parallel()
	b := newBackend(t, dockertest.BusyboxImage)
	cli := dockertest.Client(t)
	ctx := t.Context()
	sb, pool := member(t, b)
	info, err := sb.Info(ctx)
	require.NoError(t, err)
	labels := info.Labels
	labels[backend.LabelPoolState] = backend.PoolClaimed
	labels[backend.LabelSession] = "died-claiming"
	delete(labels, backend.LabelOwner)
	labels[labelClaim], labels[labelClaimNonce] = sb.ID(), "dead0000"
	_, err = cli.VolumeCreate(ctx, volume.CreateOptions{Name: claimPrefix + sb.ID(), Labels: labels})
	require.NoError(t, err)

	info, err = sb.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, backend.PoolClaimed, info.Labels[backend.LabelPoolState])
	assert.Equal(t, "died-claiming", info.Session)
	assert.Empty(t, info.Owner)
	assert.Empty(t, readyMembers(t, b, pool))
	_, err = b.Claim(ctx, sb.ID(), backend.Claim{Session: "second"})
	assert.ErrorIs(t, err, backend.ErrClaimed)

	require.NoError(t, sb.Destroy(ctx))
	_, err = cli.VolumeInspect(ctx, claimPrefix+sb.ID())
	assert.Error(t, err, "Destroy left the claim record")
}

// List finds a claimed member by the labels its claim added and no longer
// by those it removed; a claim back to ready is refused as unsupported.
func TestClaimListAndUnsupported(t *testing.T) {
	t.Parallel()
	b := newBackend(t, dockertest.BusyboxImage)
	ctx := t.Context()
	sb, pool := member(t, b)
	other, _ := member(t, b)
	_, err := b.Claim(ctx, sb.ID(), backend.Claim{Labels: map[string]string{"task": "t1", labelTestRun: ""}})
	require.NoError(t, err)

	ids := func(f backend.Filter) []string {
		infos, err := b.List(ctx, f)
		require.NoError(t, err)
		var out []string
		for _, i := range infos {
			out = append(out, i.ID)
		}
		return out
	}
	assert.Equal(t, []string{sb.ID()}, ids(backend.Filter{Labels: map[string]string{"task": "t1"}}))
	assert.Equal(t, []string{sb.ID()}, ids(backend.Filter{Labels: map[string]string{backend.LabelPool: pool}}))
	assert.NotContains(t, ids(backend.Filter{Labels: map[string]string{labelTestRun: testRun}}), sb.ID())
	assert.Contains(t, ids(backend.Filter{Labels: map[string]string{labelTestRun: testRun}}), other.ID())

	_, err = b.Claim(ctx, other.ID(), backend.Claim{Expect: backend.PoolClaimed, State: backend.PoolReady})
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	// Its record carries the test-run label no more; Destroy still
	// removes it (the leak check would not see it).
	require.NoError(t, sb.Destroy(ctx))
	_, err = dockertest.Client(t).VolumeInspect(ctx, claimPrefix+sb.ID())
	assert.Error(t, err, "Destroy left the claim record")
}

// envClaimChild makes the test binary a claimer (TestClaimAcrossProcesses).
const envClaimChild = "SBX_TEST_CLAIM_CHILD"

// Claimers in separate processes, each with its own engine connection,
// claim one member at the same instant: exactly one wins.
func TestClaimAcrossProcesses(t *testing.T) {
	if arg := os.Getenv(envClaimChild); arg != "" {
		claimChild(arg)
		return
	}
	t.Parallel()
	b := newBackend(t, dockertest.BusyboxImage)
	ctx := t.Context()
	sb, _ := member(t, b)
	const n = 6
	at := time.Now().Add(2 * time.Second).UnixNano()
	outs := make([]bytes.Buffer, n)
	cmds := make([]*exec.Cmd, n)
	for i := range n {
		cmds[i] = exec.CommandContext(ctx, os.Args[0], "-test.run=^TestClaimAcrossProcesses$")
		cmds[i].Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d,proc-%d", envClaimChild, sb.ID(), at, i))
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &outs[i]
		require.NoError(t, cmds[i].Start())
	}
	winner := ""
	for i, cmd := range cmds {
		err := cmd.Wait()
		t.Logf("claimer %d: %s", i, bytes.TrimSpace(outs[i].Bytes()))
		line, _ := bufio.NewReader(bytes.NewReader(outs[i].Bytes())).ReadString('\n')
		switch {
		case err != nil:
			t.Errorf("claimer %d: %v: %s", i, err, outs[i].String())
		case strings.HasPrefix(line, "won") && winner != "":
			t.Errorf("claimers %s and proc-%d both won", winner, i)
		case strings.HasPrefix(line, "won"):
			winner = fmt.Sprintf("proc-%d", i)
		case !strings.HasPrefix(line, "claimed"):
			t.Errorf("claimer %d: %q", i, line)
		}
	}
	require.NotEmpty(t, winner, "no claimer won")
	info, err := sb.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, winner, info.Session)
}

// claimChild claims sandbox ID with session S at unix-nano time T (arg
// "ID,T,S"), prints "won", "claimed" (another won) or the error, and exits.
func claimChild(arg string) {
	parts := strings.Split(arg, ",")
	at, _ := strconv.ParseInt(parts[1], 10, 64)
	b, err := newNative()
	if err == nil {
		// Connect first, so the claims start together.
		_, err = b.List(context.Background(), backend.Filter{Name: "none"})
	}
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	time.Sleep(time.Until(time.Unix(0, at)))
	_, err = b.Claim(context.Background(), parts[0], backend.Claim{Session: parts[2], TTL: time.Hour})
	switch {
	case err == nil:
		fmt.Println("won")
	case errors.Is(err, backend.ErrClaimed):
		fmt.Println("claimed:", err)
	default:
		fmt.Println(err)
		os.Exit(1)
	}
	os.Exit(0)
}
