//go:build !unix

package channels

import "syscall"

// canTryWrite: no non-blocking write attempts here; every data write is
// made by a goroutine of its own (parked).
const canTryWrite = false

func tryWrite(syscall.RawConn, []byte) (int, error) { return 0, nil }
