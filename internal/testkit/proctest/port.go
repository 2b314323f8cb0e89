package proctest

import (
	"fmt"
	"net"
)

// FreeAddr returns a loopback address "127.0.0.1:port" whose port was free a
// moment ago. Another process may take it before it is used; a node that
// cannot listen fails its start and says so in its log.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("proctest: free port: %w", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return "", fmt.Errorf("proctest: free port: %w", err)
	}
	return addr, nil
}
