package cli

import (
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/moby/term"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Progress modes (--progress).
const (
	progressAuto  = "auto"  // bars on a terminal, else plain
	progressBars  = "tty"   // bars, even when stderr is no terminal
	progressPlain = "plain" // one line per step, for logs
	progressNone  = "none"
)

// progressSink shows the progress Create reports (Spec.Progress) on stderr.
// It is safe for concurrent use: sbx up creates sandboxes in parallel.
type progressSink interface {
	report(backend.Progress)
	// close finishes the display; call it before anything else is written
	// to stderr.
	close()
}

// newProgress returns the sink for --progress on w.
func newProgress(mode string, w io.Writer) (progressSink, error) {
	switch mode {
	case progressAuto, "":
		if _, tty := term.GetFdInfo(w); tty {
			return newBarSink(w, false), nil
		}
		return newPlainSink(w), nil
	case progressBars:
		return newBarSink(w, true), nil
	case progressPlain:
		return newPlainSink(w), nil
	case progressNone:
		return noSink{}, nil
	}
	return nil, fmt.Errorf("--progress %q: want auto, tty, plain or none", mode)
}

// withProgress sets spec.Progress to report to sink.
func withProgress(spec backend.Spec, sink progressSink) backend.Spec {
	spec.Progress = sink.report
	return spec
}

type noSink struct{}

func (noSink) report(backend.Progress) {}
func (noSink) close()                  {}

// plainSink writes one line when a step, or one of its parts (an image
// layer), changes status, as docker pull does when its output is not a
// terminal:
//
//	[main] pull 4f4fb700ef54: Downloading (2.1 MiB)
//	[main] pull 4f4fb700ef54: Pull complete
//	[main] pull: pulled registry:5000/tools:1
//	[main] build: Step 2/4 : RUN make
//	[main] build: built sbx-build/main:latest
type plainSink struct {
	mu   sync.Mutex
	w    io.Writer
	last map[string]string // sandbox/step/part -> last status printed
}

func newPlainSink(w io.Writer) *plainSink {
	return &plainSink{w: w, last: map[string]string{}}
}

func (s *plainSink) report(p backend.Progress) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := p.Sandbox + "\x00" + p.Step + "\x00" + p.ID
	if s.last[key] == p.Status && !p.Done {
		return
	}
	s.last[key] = p.Status
	var b strings.Builder
	if p.Sandbox != "" {
		fmt.Fprintf(&b, "[%s] ", p.Sandbox)
	}
	b.WriteString(p.Step)
	if p.ID != "" {
		b.WriteString(" " + p.ID)
	}
	b.WriteString(": " + p.Status)
	if p.Step == "pull" && p.Total > 0 && !p.Done {
		fmt.Fprintf(&b, " (%s)", humanBytes(p.Total))
	}
	fmt.Fprintln(s.w, b.String())
}

func (s *plainSink) close() {}

// humanBytes formats n as docker does: "512 B", "2.1 MiB".
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// barSink draws a bar per pulled layer (bytes) and per build (steps),
// with mpb. Bars of a step complete when the step reports Done.
type barSink struct {
	p *mpb.Progress

	mu   sync.Mutex
	bars map[string]*stepBar // sandbox/step/part -> bar
}

type stepBar struct {
	bar    *mpb.Bar
	prefix string // sandbox/step/, to complete a step's bars together
	status *syncString
}

// syncString is a status text that the render goroutine reads.
type syncString struct {
	mu sync.Mutex
	s  string
}

func (s *syncString) set(v string) { s.mu.Lock(); s.s = v; s.mu.Unlock() }
func (s *syncString) get() string  { s.mu.Lock(); defer s.mu.Unlock(); return s.s }

func newBarSink(w io.Writer, force bool) *barSink {
	opts := []mpb.ContainerOption{mpb.WithOutput(w)}
	if force {
		opts = append(opts, mpb.ForceTTY(), mpb.WithAutoRefresh())
	}
	return &barSink{p: mpb.New(opts...), bars: map[string]*stepBar{}}
}

func (s *barSink) report(p backend.Progress) {
	if p.ID == "" && !p.Done && p.Step == "pull" {
		// Messages about the whole image ("Pulling from ...", "Digest:
		// ..."): the layer bars say it better.
		return
	}
	prefix := p.Sandbox + "\x00" + p.Step + "\x00"
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.Done {
		for key, b := range s.bars {
			if b.prefix == prefix {
				b.status.set(shorten(p.Status, 40))
				b.bar.SetTotal(-1, true)
				delete(s.bars, key)
			}
		}
		return
	}
	key := prefix + p.ID
	b, ok := s.bars[key]
	if !ok {
		b = &stepBar{prefix: prefix, status: &syncString{}}
		name := p.Step
		if p.ID != "" {
			name += " " + p.ID
		}
		if p.Sandbox != "" {
			name = "[" + p.Sandbox + "] " + name
		}
		bytes := p.Step == "pull"
		counters := func(st decor.Statistics) string {
			switch {
			case st.Total <= 0:
				return ""
			case bytes:
				return humanBytes(st.Current) + " / " + humanBytes(st.Total)
			}
			return fmt.Sprintf("%d/%d", st.Current, st.Total)
		}
		b.bar = s.p.AddBar(0, mpb.BarWidth(24),
			mpb.PrependDecorators(decor.Name(name, decor.WC{C: decor.DSyncWidthR | decor.DextraSpace})),
			mpb.AppendDecorators(
				decor.Any(counters),
				decor.Any(func(decor.Statistics) string { return b.status.get() }, decor.WC{C: decor.DextraSpace}),
			),
		)
		s.bars[key] = b
	}
	b.status.set(shorten(p.Status, 40))
	if p.Total > 0 {
		b.bar.SetTotal(p.Total, false)
		b.bar.SetCurrent(p.Current)
	}
	switch p.Status {
	case "Pull complete", "Already exists":
		b.bar.SetTotal(-1, true)
		delete(s.bars, key)
	}
}

// close completes what is still open (a failed Create ends without Done)
// and waits for the last frame.
func (s *barSink) close() {
	s.mu.Lock()
	for key, b := range s.bars {
		b.bar.Abort(false)
		delete(s.bars, key)
	}
	s.mu.Unlock()
	s.p.Wait()
}

func shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
