// Package buildinfo reports what a binary was built from: its version, the
// VCS commit and the Go toolchain, from the linker flags and the build
// information the Go toolchain embeds (runtime/debug.ReadBuildInfo).
package buildinfo

import (
	"fmt"
	"runtime/debug"
)

// Version is the release version. Release builds set it with
//
//	-ldflags "-X github.com/relaygw/relay/internal/buildinfo.Version=v1.2.3"
//
// (the Dockerfile and scripts/check-image.sh do). Empty: the main module's
// version from the build information ("(devel)" for a build in a checkout).
var Version string

// Commit is the VCS revision, set like Version with
// -X github.com/relaygw/relay/internal/buildinfo.Commit=<sha>. Empty: the
// vcs.revision the toolchain embedded (absent with -buildvcs=false).
var Commit string

// Info is what a binary was built from.
type Info struct {
	Version   string // Version, else the main module version, else "(devel)"
	Commit    string // Commit, else vcs.revision, else "unknown" (built outside a checkout or with -buildvcs=false)
	Modified  bool   // vcs.modified: the work tree had uncommitted changes
	GoVersion string // the toolchain, e.g. "go1.26.8"
}

// Read returns the running binary's Info.
func Read() Info {
	in := Info{Version: Version, Commit: Commit, GoVersion: "unknown"}
	if in.Commit == "" {
		in.Commit = "unknown"
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if in.Version == "" {
			in.Version = "(devel)"
		}
		return in
	}
	in.GoVersion = bi.GoVersion
	if in.Version == "" {
		in.Version = bi.Main.Version
	}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if Commit == "" {
				in.Commit = s.Value
			}
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// String is the one-line form `gateway --version` prints:
// "relay <version> (commit <sha>[, modified], <go version>)".
func (in Info) String() string {
	mod := ""
	if in.Modified {
		mod = ", modified"
	}
	return fmt.Sprintf("relay %s (commit %s%s, %s)", in.Version, in.Commit, mod, in.GoVersion)
}
