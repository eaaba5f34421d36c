package opensandbox_test

import (
	"flag"
	"os"
	"testing"
)

// TestMain runs more parallel subtests than GOMAXPROCS (the default of
// -parallel) unless -parallel is given: the suites here spend their time
// waiting for processes and HTTP round trips to the in-process server, not
// computing, so on a 2-core machine the default would leave them idle most of
// the time (measured: about half the wall time with 6 instead of 2, at the
// same CPU time).
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", "6")
	}
	os.Exit(m.Run())
}
