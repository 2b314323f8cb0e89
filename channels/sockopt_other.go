//go:build !linux

package channels

import "net"

// setUnsentLimit is a no-op where TCP_NOTSENT_LOWAT is not known.
func setUnsentLimit(*net.TCPConn, int) {}
