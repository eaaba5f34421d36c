//go:build ignore

// gen builds cmd/sbxd for every architecture sandboxkit ships it for and
// writes the gzipped binaries that package sbxdbin embeds. Run it with
// `go generate ./internal/sbxdbin` after changing cmd/sbxd, and commit the
// result; TestEmbeddedBinariesAreCurrent fails when they are stale.
//
// The build is reproducible (see embedbin.Build).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/sandboxkit/sandboxkit/internal/embedbin"
)

func main() {
	out := flag.String("o", ".", "output directory")
	flag.Parse()
	if err := embedbin.Build("sbxd", *out); err != nil {
		fmt.Fprintln(os.Stderr, "sbxdbin gen:", err)
		os.Exit(1)
	}
}
