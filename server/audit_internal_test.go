package server

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// The audit file rotates at its size into path.1 ... path.keep, dropping
// older files; reading goes over the kept files oldest first, so the
// newest entries come last and none is read twice.
func TestAuditRotation(t *testing.T) {
	path := t.TempDir() + "/audit.jsonl"
	const maxBytes, keep = 400, 2
	a, err := newAuditLog(path, maxBytes, keep, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for i := range 40 {
		a.add(AuditEntry{Time: start.Add(time.Duration(i) * time.Second), Kind: AuditTool, Tool: fmt.Sprintf("t%02d", i)})
	}
	if err := a.close(); err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, p := range []string{path, path + ".1", path + ".2"} {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if len(data) > maxBytes {
			t.Errorf("%s holds %d bytes, over the %d it rotates at", p, len(data), maxBytes)
		}
		lines += strings.Count(string(data), "\n")
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Errorf("a third old file is kept (keep = %d): %v", keep, err)
	}
	if lines >= 40 || lines < 3 {
		t.Fatalf("%d lines in the kept files: want fewer than written (40), at least one a file", lines)
	}

	a, err = newAuditLog(path, maxBytes, keep, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	got, err := a.read(auditFilter{limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != lines {
		t.Fatalf("read %d entries, the files hold %d", len(got), lines)
	}
	for i, e := range got {
		if want := fmt.Sprintf("t%02d", 40-lines+i); e.Tool != want {
			t.Fatalf("entry %d is %s, want %s: the newest %d, oldest first", i, e.Tool, want, lines)
		}
	}
	got, _ = a.read(auditFilter{limit: 2, since: start.Add(10 * time.Second)})
	if len(got) != 2 || got[1].Tool != "t39" {
		t.Errorf("limit 2 since t10: %+v", got)
	}
	// A reopened file goes on where it was (appending).
	a.add(AuditEntry{Time: start.Add(time.Hour), Kind: AuditAdmin, Route: "PUT /admin/sandboxes/{id}/egress"})
	got, _ = a.read(auditFilter{limit: 1, kind: AuditAdmin})
	if len(got) != 1 || got[0].Route != "PUT /admin/sandboxes/{id}/egress" {
		t.Errorf("kind filter after reopening: %+v", got)
	}
}

// Without a file the latest entries are kept in memory, a bounded number.
func TestAuditMemory(t *testing.T) {
	a, err := newAuditLog("", 0, 0, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	for i := range auditRing + 5 {
		a.add(AuditEntry{Kind: AuditTool, Tool: fmt.Sprint(i)})
	}
	got, _ := a.read(auditFilter{limit: maxAuditAnswer})
	if len(got) != auditRing || got[0].Tool != "5" || got[len(got)-1].Tool != fmt.Sprint(auditRing+4) {
		t.Errorf("memory: %d entries, first %s: want the latest %d, oldest first", len(got), got[0].Tool, auditRing)
	}
}
