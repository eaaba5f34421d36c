package lite

import (
	"bytes"
	"context"
	"fmt"
	"github.com/sandboxkit/sandboxkit/internal/agentbench"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/egresstest"
	"github.com/sandboxkit/sandboxkit/internal/fakenet"
)

// BenchmarkEgressCreate: Create to first exec of a sandbox with an egress
// policy against one without, alternating in the same run (the issue's
// overhead: <= 20 ms on lite).
func BenchmarkEgressCreate(b *testing.B) {
	bk, spec := benchEnv(b)
	fn := fakenet.Start(b)
	bk.cfg.EgressDNS = fn.DNS.String()
	withPolicy := spec
	withPolicy.Egress = &backend.Egress{Allow: []string{"allowed.test:443", "*.allowed.test:443"}}
	plain, enforced := egresstest.CreateTimes(b, bk.Create, spec, withPolicy, nil)
	agentbench.Report(b, "plain", plain)
	agentbench.Report(b, "egress", enforced)
	b.ReportMetric(float64((median(enforced)-median(plain)).Microseconds())/1000, "overhead-p50-ms")
}

// BenchmarkEgressDownload: an HTTP download from the fake internet through
// the enforcer (the sandbox's netprobe, allowed by name) against the same
// program on the host downloading directly, alternating in the same run
// (the issue's >= 500 MB/s through the enforcer).
func BenchmarkEgressDownload(b *testing.B) {
	bk, spec := benchEnv(b)
	fn := fakenet.Start(b)
	bk.cfg.EgressDNS = fn.DNS.String()
	spec.Egress = &backend.Egress{Allow: []string{"allowed.test:80"}}
	ctx := context.Background()
	sb, err := bk.Create(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	probe := egresstest.Netprobe(b)
	if err := sb.(*Sandbox).WriteFile(ctx, "/netprobe", bytes.NewReader(probe), 0o755); err != nil {
		b.Fatal(err)
	}
	host := filepath.Join(b.TempDir(), "netprobe")
	if err := os.WriteFile(host, probe, 0o755); err != nil {
		b.Fatal(err)
	}
	const size = 1 << 30
	direct := fmt.Sprintf("http://%s/bytes?n=%d", fn.Addr("allowed.test"), size)
	var through, plain []float64
	for b.Loop() {
		res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"/netprobe", "download", fmt.Sprintf("http://allowed.test/bytes?n=%d", size), "allowed.test"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatal(err, string(res.Stderr))
		}
		through = append(through, mbps(b, string(res.Stdout), size))
		out, err := exec.Command(host, "download", direct, "allowed.test").Output()
		if err != nil {
			b.Fatal(err)
		}
		plain = append(plain, mbps(b, string(out), size))
	}
	b.ReportMetric(medianF(through), "enforcer-MB/s")
	b.ReportMetric(medianF(plain), "direct-MB/s")
}

// mbps reads netprobe download's "BYTES SECONDS".
func mbps(b *testing.B, out string, want int64) float64 {
	var n int64
	var secs float64
	if _, err := fmt.Sscan(strings.TrimSpace(out), &n, &secs); err != nil || n != want || secs <= 0 {
		b.Fatalf("netprobe download: %q (want %d bytes): %v", out, want, err)
	}
	return float64(n) / secs / 1e6
}

func medianF(v []float64) float64 {
	d := make([]time.Duration, len(v))
	for i, x := range v {
		d[i] = time.Duration(x * 1000)
	}
	return float64(median(d)) / 1000
}
