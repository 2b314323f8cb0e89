//go:build unix

package channels

import "syscall"

// canTryWrite: non-blocking write attempts are available.
const canTryWrite = true

// tryWrite makes one non-blocking write(2) of p on rc's descriptor (Go's
// sockets are non-blocking) and returns how many bytes the kernel took;
// n < len(p) with a nil error means the send buffer is full. It never waits
// for the descriptor to become writable.
func tryWrite(rc syscall.RawConn, p []byte) (n int, err error) {
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		for {
			n, werr = syscall.Write(int(fd), p)
			if werr != syscall.EINTR {
				return true
			}
		}
	}); err != nil {
		return 0, err
	}
	if werr == syscall.EAGAIN {
		return 0, nil
	}
	if werr != nil {
		return 0, werr
	}
	return n, nil
}
