package initializers_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/initializers"
)

// arvoScript is an ARVO reproducer script in the layout OpenSage reads.
const arvoScript = `#!/bin/bash
export SANITIZER=address
export FUZZING_LANGUAGE="c++"
export ARCHITECTURE=x86_64
if [ "$1" = "compile" ]; then
    compile
else
    /out/png_read_fuzzer /tmp/poc
    /out/other_fuzzer /tmp/poc
fi
`

// oldOut is what /out holds before the initializer runs.
func oldOut() map[string]string {
	return map[string]string{"/out/old_fuzzer": "#!/bin/sh\necho old build\n"}
}

func newFuzz(t *testing.T) initializers.Initializer {
	t.Helper()
	in, err := initializers.FuzzFactory().New(initializers.FuzzFactory().NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func TestFuzzConfig(t *testing.T) {
	in := newFuzz(t)
	if deps := in.DependsOn(); len(deps) != 1 || deps[0] != (initializers.Dependency{Name: "main"}) {
		t.Errorf("fuzz needs main: %+v", deps)
	}
	if env := in.Publish("fuzz"); len(env) != 0 {
		t.Errorf("fuzz publishes nothing: %v", env)
	}
	if _, err := newFrom(t, initializers.FuzzFactory(), func(c *initializers.FuzzConfig) { c.CompileTimeout = 0 }); err == nil ||
		!strings.Contains(err.Error(), "compile_timeout_sec") {
		t.Errorf("zero compile_timeout_sec: %v", err)
	}
}

// TestFuzzStandIn: the settings come from /bin/arvo (quotes dropped), the
// stand-in compile_aflpp.sh runs with them, and its new /out replaces the
// old one, which it moved to /out.bak.
func TestFuzzStandIn(t *testing.T) {
	files := oldOut()
	files["/bin/arvo"] = arvoScript
	// The sandbox's own environment must not win over /bin/arvo.
	sb := standIn(t, files, map[string]string{"SANITIZER": "memory"})
	var status statusLog
	if err := newFuzz(t).Provision(t.Context(), sessionInstance("fuzz", sb, &status)); err != nil {
		t.Fatalf("provision: %v\nprogress:\n%s", err, status.String())
	}
	if env, _ := readIn(t, sb, "/out/build.env"); env != "address\nc++\nx86_64\nafl\n" {
		t.Errorf("compile_aflpp.sh ran with %q, want /bin/arvo's SANITIZER, FUZZING_LANGUAGE, ARCHITECTURE", env)
	}
	if _, ok := readIn(t, sb, "/out/afl-fuzz"); !ok {
		t.Error("/out/afl-fuzz was not built")
	}
	if _, ok := readIn(t, sb, "/out.bak/old_fuzzer"); !ok {
		t.Error("the old /out was not kept in /out.bak")
	}
	if want := "ARCHITECTURE=x86_64 FUZZING_LANGUAGE=c++ SANITIZER=address bash /sandbox_scripts/ossfuzz/compile_aflpp.sh"; !strings.Contains(status.String(), want) {
		t.Errorf("progress lacks %q:\n%s", want, status.String())
	}
}

// TestFuzzStandInFallback: without /bin/arvo the settings come from the
// sandbox's environment and run_poc is read.
func TestFuzzStandInFallback(t *testing.T) {
	files := oldOut()
	files["/usr/local/bin/run_poc"] = "#!/bin/sh\n  /out/tiff_fuzzer /tmp/poc\n"
	sb := standIn(t, files, map[string]string{"SANITIZER": "undefined", "FUZZING_LANGUAGE": "c", "ARCHITECTURE": "i386"})
	if err := newFuzz(t).Provision(t.Context(), sessionInstance("fuzz", sb, &statusLog{})); err != nil {
		t.Fatalf("provision: %v", err)
	}
	if env, _ := readIn(t, sb, "/out/build.env"); env != "undefined\nc\ni386\nafl\n" {
		t.Errorf("compile_aflpp.sh ran with %q, want the sandbox's environment", env)
	}
}

// TestFuzzStandInFailures: a failing build restores /out from /out.bak;
// a variable found nowhere is an error naming it.
func TestFuzzStandInFailures(t *testing.T) {
	t.Run("build fails", func(t *testing.T) {
		files := oldOut()
		files["/bin/arvo"] = arvoScript
		sb := standIn(t, files, map[string]string{"STANDIN_FAIL": "afl-clang-fast: not found"})
		err := newFuzz(t).Provision(t.Context(), sessionInstance("fuzz", sb, &statusLog{}))
		var se *initializers.StepError
		if !errors.As(err, &se) || se.Sandbox != "fuzz" || se.Step != "AFL++ build" {
			t.Fatalf("want a *StepError of sandbox fuzz, step AFL++ build: %v", err)
		}
		for _, want := range []string{`sandbox "fuzz"`, "compile_aflpp.sh", "exit code 1", "compile: error: afl-clang-fast: not found"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q:\n%v", want, err)
			}
		}
		if _, ok := readIn(t, sb, "/out/old_fuzzer"); !ok {
			t.Error("/out was not restored from /out.bak")
		}
		if _, ok := readIn(t, sb, "/out/partial"); ok {
			t.Error("the failed build's partial /out is still there")
		}
		if _, ok := readIn(t, sb, "/out.bak/old_fuzzer"); ok {
			t.Error("/out.bak is still there after the restore")
		}
	})
	for name, tc := range map[string]struct {
		files map[string]string
		env   map[string]string
		want  []string
	}{
		"arvo without ARCHITECTURE": {
			files: map[string]string{"/bin/arvo": "export SANITIZER=address\nexport FUZZING_LANGUAGE=c\n"},
			want:  []string{`sandbox "fuzz"`, "reading the fuzz settings", `/bin/arvo has no "export ARCHITECTURE=" line`},
		},
		"no arvo and FUZZING_LANGUAGE unset": {
			files: map[string]string{"/usr/local/bin/run_poc": "  /out/x /tmp/poc\n"},
			env:   map[string]string{"SANITIZER": "address", "ARCHITECTURE": "x86_64"},
			want:  []string{`sandbox "fuzz"`, "FUZZING_LANGUAGE is not set", "/bin/arvo"},
		},
		"no arvo and no run_poc": {
			env:  map[string]string{"SANITIZER": "address", "FUZZING_LANGUAGE": "c", "ARCHITECTURE": "x86_64"},
			want: []string{`sandbox "fuzz"`, "/usr/local/bin/run_poc"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			files := oldOut()
			for k, v := range tc.files {
				files[k] = v
			}
			sb := standIn(t, files, tc.env)
			err := newFuzz(t).Provision(t.Context(), sessionInstance("fuzz", sb, &statusLog{}))
			if err == nil {
				t.Fatal("want an error")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
			if _, ok := readIn(t, sb, "/out/old_fuzzer"); !ok {
				t.Error("/out was touched although nothing was built")
			}
		})
	}
}
