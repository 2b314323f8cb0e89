//go:build !linux

package channels

import "syscall"

// poller is not available here: every socket is read by a goroutine of its
// own (see sockReader).
type poller struct{}

var readPoller poller

func (poller) add(*sockReader, syscall.RawConn, bool) bool { return false }
func (poller) arm(*sockReader) bool                        { return false }
func (poller) remove(*sockReader)                          {}
func (poller) pending(*sockReader) bool                    { return true }
