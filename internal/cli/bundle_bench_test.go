package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/remotetest"
)

// BenchmarkMoveRemote moves a native session whose main sandbox has 100
// MiB of changes to the remote-host harness with sbx move (snapshot, the
// image save streamed through the SSH connection into the remote engine's
// image load, the volumes, the launch there and the removal of the
// original) and, in alternating rounds of the same run, does by hand what
// moves the same files: docker commit, then docker save | ssh HOST docker
// load. It reports the seconds of each per round, the MB/s of the image
// each moved, and move's throughput as a fraction of the manual one's
// (the target: >= 0.9): for the whole command, which also starts
// the session on the remote host and removes the original, and for its
// transfer (from the start to the images loaded there, as move's progress
// reports it), which is what the manual pipe does.
//
//	go test -run '^$' -bench MoveRemote -benchtime 3x ./internal/cli/
func BenchmarkMoveRemote(b *testing.B) {
	setup(b)
	cli := dockertest.Client(b)
	dockertest.RequireImage(b, cli, dockertest.BusyboxImage)
	h := remotetest.Get(b)
	src := writeConfig(b, fmt.Sprintf("[sandbox]\nbackend = \"native\"\n[sandbox.sandboxes.main]\nimage = %q\nworking_dir = \"/root\"\n", dockertest.BusyboxImage))
	dst := remoteConfig(b, h)
	ssh := []string{"-F", "none", "-i", h.Key, "-o", "UserKnownHostsFile=" + h.KnownHosts, "-o", "StrictHostKeyChecking=yes",
		"-p", fmt.Sprint(h.SSHPort), h.User + "@" + h.Addr}
	remote := func(args ...string) *exec.Cmd {
		return exec.Command("ssh", append(ssh, append([]string{"docker", "-H", "unix://" + h.DockerSocket}, args...)...)...)
	}
	// A session with 100 MiB of changes; its main sandbox's ID.
	fresh := func() (string, string) {
		var res upResult
		if err := json.Unmarshal([]byte(must(b, "--config", src, "--json", "--progress", "none", "up")), &res); err != nil {
			b.Fatal(err)
		}
		main := res.Sandboxes[0].ID
		must(b, "--config", src, "exec", main, "--", "sh", "-c", "head -c 104857600 /dev/urandom > /root/big")
		return res.Session, main
	}
	var moveT, loadT, handT time.Duration
	var bytesMoved int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		sess, _ := fresh()
		b.StartTimer()
		start := time.Now()
		r := sbx(b, "--config", src, "--json", "--progress", "plain", "move", sess, "--to", dst)
		moveT += time.Since(start)
		b.StopTimer()
		r.expect(b, 0)
		// "move: images loaded: 101.9 MiB in 3.2s (...)": the transfer,
		// from the start of the restore (at once) to the images loaded.
		_, after, ok := strings.Cut(r.stderr, "images loaded: ")
		_, after, ok2 := strings.Cut(after, " in ")
		d, err := time.ParseDuration(strings.Fields(after + " x")[0])
		if !ok || !ok2 || err != nil {
			b.Fatalf("no transfer time in sbx move's progress: %q", r.stderr)
		}
		loadT += d
		var res upResult
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			b.Fatal(err)
		}
		must(b, "--config", dst, "down", res.Session)

		sess, main := fresh()
		cid, err := exec.Command("docker", "ps", "-q", "--filter", "label=sandboxkit.id="+main).Output()
		if err != nil || len(bytes.Fields(cid)) != 1 {
			b.Fatalf("the container of sandbox %s: %v %q", main, err, cid)
		}
		tag := "sandboxkit-bench/move:" + fmt.Sprint(i)
		b.StartTimer()
		start = time.Now()
		if out, err := exec.Command("docker", "commit", strings.TrimSpace(string(cid)), tag).CombinedOutput(); err != nil {
			b.Fatalf("docker commit: %v: %s", err, out)
		}
		save := exec.Command("docker", "save", tag)
		load := remote("load")
		pipe, err := save.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		var loadOut bytes.Buffer
		load.Stdin, load.Stdout, load.Stderr = pipe, &loadOut, &loadOut
		if err := save.Start(); err != nil {
			b.Fatal(err)
		}
		if err := load.Run(); err != nil {
			b.Fatalf("ssh ... docker load: %v: %s", err, loadOut.String())
		}
		if err := save.Wait(); err != nil {
			b.Fatal(err)
		}
		handT += time.Since(start)
		b.StopTimer()
		if !strings.Contains(loadOut.String(), tag) {
			b.Fatalf("docker load printed %q", loadOut.String())
		}
		size, err := exec.Command("docker", "image", "inspect", "-f", "{{.Size}}", tag).Output()
		if err != nil {
			b.Fatal(err)
		}
		var n int64
		fmt.Sscan(string(size), &n)
		bytesMoved += n
		exec.Command("docker", "rmi", tag).Run()
		remote("rmi", tag).Run()
		must(b, "--config", src, "down", sess)
		b.StartTimer()
	}
	b.StopTimer()
	b.Cleanup(func() {
		b.Setenv("SBX_CONFIG", dst)
		sbx(b, "gc")
		b.Setenv("SBX_CONFIG", src)
		sbx(b, "gc")
	})
	n := float64(b.N)
	b.ReportMetric(moveT.Seconds()/n, "move-s/round")
	b.ReportMetric(handT.Seconds()/n, "save-ssh-load-s/round")
	b.ReportMetric(float64(bytesMoved)/1e6/moveT.Seconds(), "move-MB/s")
	b.ReportMetric(float64(bytesMoved)/1e6/handT.Seconds(), "save-ssh-load-MB/s")
	b.ReportMetric(loadT.Seconds()/n, "move-images-loaded-s/round")
	b.ReportMetric(handT.Seconds()/moveT.Seconds(), "move/manual-throughput")
	b.ReportMetric(handT.Seconds()/loadT.Seconds(), "move-transfer/manual-throughput")
}
