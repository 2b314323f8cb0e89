package buildinfo

import (
	"runtime"
	"strings"
	"testing"
)

func TestReadNamesToolchainAndVersion(t *testing.T) {
	in := Read()
	if in.GoVersion != runtime.Version() {
		t.Fatalf("GoVersion %q, want %q", in.GoVersion, runtime.Version())
	}
	if in.Version == "" || in.Commit == "" {
		t.Fatalf("empty fields: %+v", in)
	}
	oldV, oldC := Version, Commit
	t.Cleanup(func() { Version, Commit = oldV, oldC })
	Version, Commit = "v9.9.9", "abc123"
	in = Read()
	if in.Version != "v9.9.9" || in.Commit != "abc123" {
		t.Fatalf("Version %q Commit %q, want the linker-set v9.9.9 and abc123", in.Version, in.Commit)
	}
	if s := in.String(); !strings.HasPrefix(s, "relay v9.9.9 (commit abc123") || !strings.Contains(s, runtime.Version()) {
		t.Fatalf("String() = %q", s)
	}
}
