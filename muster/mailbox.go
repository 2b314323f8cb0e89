package muster

import "context"

// mailbox is the typed inbox of one of the scope's goroutines (the
// coordinator or a shard). It outlives restarts of that goroutine. M is a
// sealed message interface (coordMsg, shardMsg): only this package's
// message types implement it.
type mailbox[M any] struct {
	ch      chan M
	closing <-chan struct{}
}

func newMailbox[M any](capacity int, closing <-chan struct{}) mailbox[M] {
	return mailbox[M]{ch: make(chan M, capacity), closing: closing}
}

// post puts msg in the mailbox unless ctx ends (ctx's error) or the scope
// closes (ErrClosed).
func (mb mailbox[M]) post(ctx context.Context, msg M) error {
	select {
	case mb.ch <- msg:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-mb.closing:
		return ErrClosed
	}
}

// postAsync is post for timers, monitors and RPC workers: it waits for room
// until the scope closes.
func (mb mailbox[M]) postAsync(msg M) { _ = mb.post(context.Background(), msg) }

// coordMsg is a message for the coordinator's mailbox.
type coordMsg interface{ coordMsg() }

// shardMsg is a message for a shard's mailbox.
type shardMsg interface{ shardMsg() }

func (*nodeSeen) coordMsg()    {}
func (*inbound) coordMsg()     {}
func (*inboundCall) coordMsg() {}
func (*roundDone) coordMsg()   {}
func (*prepareDone) coordMsg() {}
func (*drainReq) coordMsg()    {}
func (*dumpReq) coordMsg()     {}
func (*promote) coordMsg()     {}
func (*settled) coordMsg()     {}
func (*resetReq) coordMsg()    {}
func (*tickReq) coordMsg()     {}
func (*suspectReq) coordMsg()  {}
func (*coordFunc) coordMsg()   {}

func (*joinReq) shardMsg()         {}
func (*leaveReq) shardMsg()        {}
func (*memberDown) shardMsg()      {}
func (*occupiedDone) shardMsg()    {}
func (*cooldownExpired) shardMsg() {}
func (*flushReq) shardMsg()        {}
func (*vacantDone) shardMsg()      {}
func (*gatherReq) shardMsg()       {}
func (*rebuildReq) shardMsg()      {}
func (*crashReq) shardMsg()        {}
func (*inspectReq) shardMsg()      {}
