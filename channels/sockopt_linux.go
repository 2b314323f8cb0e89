package channels

import (
	"net"
	"syscall"
)

// tcpNotSentLowat is TCP_NOTSENT_LOWAT (linux/tcp.h).
const tcpNotSentLowat = 0x19

// setUnsentLimit bounds the bytes the kernel holds unsent for c (see
// EndpointConfig.UnsentBytes). Failure leaves the system default.
func setUnsentLimit(c *net.TCPConn, n int) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpNotSentLowat, n)
	})
}
