package channels

import (
	"errors"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// poller waits for readability of idle sockets' connections on one epoll
// instance for the process (see sockReader). Registrations are
// level-triggered and one-shot and carry the reader's id, never the fd: an
// event read from the kernel for a connection that has since closed finds no
// reader (or its reader, which then sees the end), and a reused fd number
// cannot reach another socket's reader. epoll_ctl calls go through
// syscall.RawConn.Control, which holds the fd open for the call, so a
// registration is never changed for an fd that was closed and reused.
//
// One goroutine (wait) blocks in epoll_wait while any connection is
// registered, holding one OS thread; it exits when the last one leaves
// (eventfd wake) and is started again by the next registration.
type poller struct {
	mu      sync.Mutex
	epfd    int // -1 before first use
	evfd    int // eventfd that wakes wait
	failed  bool
	running bool // wait runs; guarded by mu
	next    uint64
	readers map[uint64]*sockReader // guarded by mu
}

// readPoller is the process's poller.
var readPoller = poller{epfd: -1}

// wakeID is the event key of the poller's eventfd (reader ids start at 1).
const wakeID = 0

// pollEvents: readable, peer shut down writing; one-shot (re-armed by
// arm); level-triggered, so re-arming a connection with bytes pending
// reports it at once. EPOLLERR and EPOLLHUP are always reported.
const pollEvents = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT

func pollEvent(events uint32, id uint64) unix.EpollEvent {
	return unix.EpollEvent{Events: events, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
}

func eventID(ev *unix.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}

// initLocked creates the epoll instance and its eventfd.
func (p *poller) initLocked() error {
	if p.failed {
		return errors.New("channels: read poller unavailable")
	}
	if p.epfd >= 0 {
		return nil
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		p.failed = true
		return err
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		_ = unix.Close(epfd)
		p.failed = true
		return err
	}
	ev := pollEvent(unix.EPOLLIN, wakeID)
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &ev); err != nil {
		_ = unix.Close(epfd)
		_ = unix.Close(evfd)
		p.failed = true
		return err
	}
	p.epfd, p.evfd = epfd, evfd
	p.readers = make(map[uint64]*sockReader)
	return nil
}

// add registers r's connection (rc), armed or not; it reports false when
// the poller cannot take it (the reader then reads on a goroutine of its
// own). A reader that starts reading at once registers unarmed: an armed
// registration would report bytes that reader consumes, and the wake would
// start a read with nothing to read (a goroutine waiting for the next
// message). Its first re-arm (arm) arms it.
func (p *poller) add(r *sockReader, rc syscall.RawConn, armed bool) bool {
	p.mu.Lock()
	if p.initLocked() != nil {
		p.mu.Unlock()
		return false
	}
	p.next++
	r.id, r.rc = p.next, rc
	p.readers[r.id] = r
	if !p.running {
		p.running = true
		go p.wait(p.epfd)
	}
	epfd := p.epfd
	p.mu.Unlock()
	events := uint32(unix.EPOLLONESHOT) // unarmed (EPOLLERR and EPOLLHUP are still reported, once)
	if armed {
		events = pollEvents
	}
	if ctlEvents(epfd, unix.EPOLL_CTL_ADD, r, events) {
		return true
	}
	p.remove(r)
	r.rc = nil
	return false
}

// arm re-arms r's registration after a read run; false when the
// connection has closed or the poller failed.
func (p *poller) arm(r *sockReader) bool {
	p.mu.Lock()
	epfd, failed := p.epfd, p.failed
	p.mu.Unlock()
	return !failed && ctl(epfd, unix.EPOLL_CTL_MOD, r)
}

// remove unregisters r (before its connection is closed by the socket's
// end, when it is still open).
func (p *poller) remove(r *sockReader) {
	ctl(p.epfdNow(), unix.EPOLL_CTL_DEL, r)
	p.mu.Lock()
	delete(p.readers, r.id)
	if len(p.readers) == 0 && p.running {
		var one [8]byte
		one[0] = 1 // eventfd counters are host-endian; 1 is nonzero either way
		_, _ = unix.Write(p.evfd, one[:])
	}
	p.mu.Unlock()
}

// pending reports whether r's connection may have input: bytes, the end of
// the stream or an error (a non-blocking MSG_PEEK of one byte that does not
// answer EAGAIN), or the connection is closed. A wake can come for bytes
// that the run before already read (they arrived after its re-arm and were
// read with the bytes before them); pending tells those apart.
func (p *poller) pending(r *sockReader) bool {
	var b [1]byte
	more := true
	err := r.rc.Control(func(fd uintptr) {
		_, _, perr := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		more = perr != unix.EAGAIN
	})
	return err != nil || more
}

func (p *poller) epfdNow() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.epfd
}

// ctl applies op to r's connection while its fd is held open; false when the
// connection is closed or the call failed.
func ctl(epfd, op int, r *sockReader) bool { return ctlEvents(epfd, op, r, pollEvents) }

func ctlEvents(epfd, op int, r *sockReader, events uint32) bool {
	var cerr error
	ev := pollEvent(events, r.id)
	err := r.rc.Control(func(fd uintptr) { cerr = unix.EpollCtl(epfd, op, int(fd), &ev) })
	return err == nil && cerr == nil
}

// wait delivers readiness to readers until no connection is registered.
// Should epoll_wait fail (it does not on a valid instance), every reader
// is woken and the poller is marked failed: the readers then read on
// goroutines of their own.
func (p *poller) wait(epfd int) {
	events := make([]unix.EpollEvent, 128)
	ready := make([]*sockReader, 0, len(events))
	for {
		n, err := unix.EpollWait(epfd, events, -1)
		if err == unix.EINTR {
			continue
		}
		p.mu.Lock()
		if err != nil {
			p.failed, p.running = true, false
			for _, r := range p.readers {
				ready = append(ready, r)
			}
			p.mu.Unlock()
			for _, r := range ready {
				r.wake()
			}
			return
		}
		for i := range events[:n] {
			id := eventID(&events[i])
			if id == wakeID {
				var b [8]byte
				_, _ = unix.Read(p.evfd, b[:])
				if len(p.readers) == 0 {
					p.running = false
					p.mu.Unlock()
					return
				}
				continue
			}
			if r := p.readers[id]; r != nil {
				ready = append(ready, r)
			}
		}
		p.mu.Unlock()
		for i, r := range ready {
			r.wake()
			ready[i] = nil
		}
		ready = ready[:0]
	}
}
