package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes aligned columns, like docker ps.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cols ...string) {
	fmt.Fprintln(t.tw, strings.Join(cols, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// shortDuration formats a duration compactly, like docker ps: "45s", "3m",
// "5h", "2d".
func shortDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// handOver writes out, what names things a command made (their IDs or
// references), to w; when it cannot be written, the caller never learns
// of them, so undo removes them, and the error says so.
func handOver(ctx context.Context, w io.Writer, out []byte, what string, undo func(ctx context.Context) error) error {
	_, err := w.Write(out)
	if err == nil {
		return nil
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if uerr := undo(uctx); uerr != nil {
		return fmt.Errorf("writing the %s made: %w (removing them failed too: %v; sbx gc does not remove them, sbx ls shows them)", what, err, uerr)
	}
	return fmt.Errorf("writing the %s made: %w; they were removed, since no one could learn of them", what, err)
}

// jsonBytes is v as printJSON writes it.
func jsonBytes(v any) []byte {
	var buf bytes.Buffer
	printJSON(&buf, v)
	return buf.Bytes()
}
