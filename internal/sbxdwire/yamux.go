package sbxdwire

import (
	"io"
	"time"

	"github.com/hashicorp/yamux"
)

// YamuxConfig is the session configuration both ends use.
func YamuxConfig() *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	// A larger window than the default 256 KiB keeps file copies fast over
	// a stream with a few hundred microseconds of latency; memory stays
	// bounded by it per stream.
	cfg.MaxStreamWindowSize = 1 << 20
	cfg.StreamOpenTimeout = 30 * time.Second
	cfg.StreamCloseTimeout = 30 * time.Second
	return cfg
}
