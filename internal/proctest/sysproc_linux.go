package proctest

import "syscall"

// sysProcAttr puts the child in its own process group (a terminal's Ctrl-C
// reaches only the test binary) and has the kernel SIGKILL it if the thread
// that started it dies, so a crashed test binary leaves no node behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
