package proctest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ModuleRoot returns the directory holding go.mod, searching upward from
// the working directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("proctest: module root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("proctest: module root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Build compiles the gateway command (./cmd/gateway of the module) into
// out. With race the binary is built with the race detector, so a data race
// in a node under test shows up in its log (see Logs.Races).
func Build(ctx context.Context, out string, race bool) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/gateway")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("proctest: go %v: %w\n%s", args, err, b)
	}
	return nil
}
