package proctest

import (
	"context"
	"fmt"
	"os"
)

// parentEnv makes the test binary act as a test process that starts a node
// and then dies (see helperParent).
const parentEnv = "PROCTEST_HELPER_PARENT"

// helperParent stands in for a test binary: it starts a node (the helper
// node) with Proc, prints "node pid N" on stdout once it is ready, and then
// blocks until it is killed, never stopping the node itself.
func helperParent() {
	addr, err := FreeAddr()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	p := NewProc("orphan", addr, os.Args[0], []string{helperEnv + "=1", parentEnv + "=", "ADDR=" + addr, "NODE_NAME=orphan"})
	if err := p.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	p.mu.Lock()
	pid := p.cmd.Process.Pid
	p.mu.Unlock()
	fmt.Printf("node pid %d\n", pid)
	select {}
}
