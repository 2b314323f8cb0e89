package proctest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// procGone reports whether pid no longer runs: no /proc entry, or a zombie
// (exited, waiting for a reaper that may not be there in a container).
func procGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// A test binary that dies without stopping its nodes (killed by a timeout,
// SIGKILL, a crash) leaves none running: the kernel kills each node when the
// test binary dies (Pdeathsig), so a failed `make test` leaves no gateway
// behind.
func TestNodeDiesWithTheTestBinary(t *testing.T) {
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), parentEnv+"=1")
	parent.Stderr = os.Stderr
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = parent.Process.Kill(); _ = parent.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the node pid from the parent: %v (%q)", err, line)
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(line), "node pid "))
	if err != nil {
		t.Fatalf("parent printed %q", line)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if procGone(pid) {
		t.Fatalf("node pid %d not running before the parent dies", pid)
	}

	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	// The kernel signals the node as the parent dies; the poll bounds a
	// failing run only.
	deadline := time.Now().Add(StartTimeout)
	for !procGone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("node pid %d still runs %v after its test binary was killed", pid, StartTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
