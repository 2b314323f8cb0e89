//go:build !linux

package proctest

import (
	"context"
	"syscall"
)

// sysProcAttr puts the child in its own process group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// waitStopped cannot observe a stop here; it returns at once.
func waitStopped(context.Context, int) error { return nil }
