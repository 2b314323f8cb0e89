package proctest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// sysProcAttr puts the child in its own process group (a terminal's Ctrl-C
// reaches only the test binary) and has the kernel SIGKILL it if the thread
// that started it dies, so a crashed test binary leaves no node behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// waitStopped waits until every thread of process pid is stopped (state T
// in /proc/<pid>/task/*/stat). kill(SIGSTOP) returns once the signal is
// queued; the group stop happens when one thread dequeues it, and until
// then the other threads run on (on a loaded machine, long enough to
// answer a request).
func waitStopped(ctx context.Context, pid int) error {
	for {
		stopped, err := allStopped(pid)
		if err != nil {
			return err
		}
		if stopped {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("proctest: pid %d not stopped: %w", pid, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

func allStopped(pid int) (bool, error) {
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		return false, fmt.Errorf("proctest: threads of pid %d: %v", pid, err)
	}
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			return false, nil // a thread that just ended
		}
		// "pid (comm) S ...": the state follows the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) {
			return false, fmt.Errorf("proctest: %s: %q", f, s)
		}
		if st := s[i+2]; st != 'T' && st != 't' {
			return false, nil
		}
	}
	return true, nil
}
