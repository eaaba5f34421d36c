package backendtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// notInSuite names the interfaces of package backend that the suite has no
// case for, each with the reason. Everything else the package declares
// must have a case: a new optional interface fails TestEveryInterfaceHasACase
// until it gets one here or there.
var notInSuite = map[string]string{
	"Terminal":          "what Terminaler's Terminal returns: the Terminaler case checks it",
	"Settings":          "facts of the config file a Factory reads, not a sandbox's or backend's capability: config/registry_test.go",
	"Wrapper":           "how As finds capabilities through wrappers (sbxd's client): every backend's conformance run through sbxd (sbxd.WrapBackend) finds the optional interfaces through it",
	"BackendWrapper":    "how AsBackend finds backend-level capabilities through wrappers (sbxd.WrapBackend): the conformance runs through sbxd find VolumeManager, NetworkManager and Claimer through it",
	"CachePruner":       "caches are backend-specific (native's sbxd volumes, lite's and local's snapshot layers): their packages' tests and internal/cli/snapshot_test.go (sbx gc) check pruning",
	"RemovalWaiter":     "only k8s has it (a pod's teardown after Destroy): backends/k8s/removed_test.go",
	"CredentialRotator": "needs a fake internet and the real server's view of a request: each brokering backend's TestEgressCredentials rotates a value and sees the server get the new one",
	"EgressController":  "needs a fake internet to test a policy: internal/egresstest.Run and RunBoundary, run by every backend that enforces egress",
	"Readlinker":        "an optimisation of Readlink that no backend implements yet; fileops/fileopstest checks Readlink's results on every backend",
	"ImageArchiver":     "moves images between backends: internal/cli/bundle_test.go and snapshot_test.go (sbx snapshot -o, sbx restore, sbx move) on lite, native and remotedocker",
	"CleanResetter":     "a warm pool's choice between Reset and removal: backends/lite/reset_test.go (TestResetCrossesNoState) checks what lite's CleanReset promises",
	"OneShotRunner":     "only lite has it (sbx run's command as the sandbox's first process): backends/lite/once_test.go on runc and both gVisors (output, exit codes, stdin, timeout, cancel, egress, runtime failures, nothing left) and internal/cli/run_test.go",
}

// TestEveryInterfaceHasACase: each interface package backend declares
// has a case in this suite (its name appears in the suite's code) or a
// stated reason in notInSuite, and notInSuite names no interface that is
// gone or has a case now.
func TestEveryInterfaceHasACase(t *testing.T) {
	ifaces := backendInterfaces(t)
	if len(ifaces) < 10 {
		t.Fatalf("found only %d interfaces in package backend: %v", len(ifaces), ifaces)
	}
	suite := suiteSource(t)
	for _, name := range ifaces {
		used := regexp.MustCompile(`\bbackend\.` + name + `\b`).MatchString(suite)
		reason, excused := notInSuite[name]
		switch {
		case !used && !excused:
			t.Errorf("backend.%s has no case in the suite and no reason in notInSuite", name)
		case used && excused:
			t.Errorf("backend.%s has a case in the suite now: drop it from notInSuite (%q)", name, reason)
		}
	}
	for name := range notInSuite {
		if !slices.Contains(ifaces, name) {
			t.Errorf("notInSuite names %s, which package backend does not declare", name)
		}
	}
}

// backendInterfaces returns the exported interface types package backend
// declares.
func backendInterfaces(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join("..", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, spec := range g.Specs {
				ts := spec.(*ast.TypeSpec)
				if _, ok := ts.Type.(*ast.InterfaceType); ok && ts.Name.IsExported() {
					out = append(out, ts.Name.Name)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// suiteSource is the text of the suite's own files (not its tests).
func suiteSource(t *testing.T) string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}
