package lite

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
)

// A fork sees the file system its parent sees, wherever the parent changed
// its image: deleted and changed files, a folder replaced by another, a
// file by a folder and a folder by a file, a new working tree with hard
// links; and the fork's own host name, not the parent's.
func TestForkSeesTheParentsFiles(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	parent := create(t, b, e.spec("fork-view"))
	ctx := t.Context()
	res, err := parent.Exec(ctx, backend.ExecRequest{Shell: `set -e
rm /bin/true
echo changed > /etc/passwd; chmod 600 /etc/passwd
rm -rf /sbin; mkdir /sbin; echo only > /sbin/only
rm -rf /usr; echo "was a folder" > /usr
rm -rf /root; mkdir -p /root/work/deep; echo hi > /root/work/deep/f; ln /root/work/deep/f /root/work/hard
ln -s deep/f /root/work/link; mkfifo /root/work/fifo; chmod 4755 /root/work/deep/f
chown -R 1000:50 /root/work/deep`})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("changing the parent: %v %d %s", err, res.ExitCode, res.Stderr)
	}
	// Everything but the mounts' contents, with modes, owners, sizes,
	// link counts and contents.
	const describe = `find / -xdev \( -path /proc -o -path /sys -o -path /dev \) -prune -o -print | sort | while read -r p; do
  stat -c '%n %F %a %u:%g %s %h' "$p"
  case "$p" in /etc/hosts|/etc/hostname) ;; *) [ -f "$p" ] && [ ! -p "$p" ] && md5sum "$p";; esac
done; hostname`
	view := func(sb backend.Sandbox) string {
		res, err := sb.Exec(ctx, backend.ExecRequest{Shell: describe})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("describing: %v %d %s", err, res.ExitCode, res.Stderr)
		}
		return string(res.Stdout)
	}
	want := view(parent)
	if b.runtime.gvisor() {
		// gVisor keeps the named pipes made inside in its sentry, not in
		// the root file system a fork copies: the fork has no fifo.
		lines := strings.SplitAfter(want, "\n")
		want = strings.Join(slices.DeleteFunc(lines, func(l string) bool { return strings.Contains(l, " fifo ") }), "")
	}
	destroyAtCleanup := func(forks []backend.Sandbox) {
		for _, fk := range forks {
			t.Cleanup(func() { fk.Destroy(context.WithoutCancel(ctx)) })
		}
	}
	forks, err := parent.Fork(ctx, backend.ForkRequest{N: 2})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	destroyAtCleanup(forks)
	// The next fork starts the container made ahead meanwhile, with the
	// parent's layer merged into its root file system.
	b.waitBackground()
	standby := recordOf(t, parent).ForkStandby
	if standby == "" {
		t.Fatal("no container was made ahead for the next fork")
	}
	next, err := parent.Fork(ctx, backend.ForkRequest{N: 1})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	destroyAtCleanup(next)
	if next[0].ID() != standby {
		t.Errorf("the fork is %s, not the container made ahead (%s)", next[0].ID(), standby)
	}
	forks = append(forks, next...)
	for i, fk := range forks {
		got := view(fk)
		if w := strings.ReplaceAll(want, parent.ID(), fk.ID()); got != w {
			t.Errorf("fork %d sees:\n%s\nthe parent:\n%s", i, got, w)
		}
	}
}

// recordOf reads sb's record.
func recordOf(t *testing.T, sb backend.Sandbox) *meta {
	t.Helper()
	m, err := sb.(*Sandbox).meta()
	if err != nil {
		t.Fatal(err)
	}
	return m
}
