package channels

import (
	"context"
	"sync"
	"testing"
	"time"
)

// memTransport is an in-memory Transport: written frames land in a slice and
// a channel; when gated, every Write waits for a token on gate.
type memTransport struct {
	gate    chan struct{}
	waiting chan int // when gated, receives the batch size of each blocked Write

	mu     sync.Mutex
	frames []Frame
	code   CloseCode
	closed chan struct{}
	wrote  chan struct{} // one token per Write call (buffered, best effort)
}

func newMemTransport() *memTransport {
	return &memTransport{closed: make(chan struct{}), wrote: make(chan struct{}, 1<<16)}
}

func (m *memTransport) Write(ctx context.Context, frames []Frame) error {
	if m.gate != nil {
		if m.waiting != nil {
			m.waiting <- len(frames)
		}
		select {
		case <-m.gate:
		case <-ctx.Done():
			return ctx.Err()
		case <-m.closed:
			return ErrSocketClosed
		}
	}
	m.mu.Lock()
	m.frames = append(m.frames, frames...)
	m.mu.Unlock()
	select {
	case m.wrote <- struct{}{}:
	default:
	}
	return nil
}

func (m *memTransport) Close(code CloseCode, _ string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.code == 0 {
		m.code = code
		close(m.closed)
	}
	return nil
}

func (m *memTransport) written() []Frame {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Frame(nil), m.frames...)
}

// waitFrames polls until n frames were written (an eventual condition with a
// deadline; no trace point marks the end of an in-memory write).
func (m *memTransport) waitFrames(t testing.TB, n int) []Frame {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		if f := m.written(); len(f) >= n {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("wrote %d frames, want %d", len(m.written()), n)
		}
		select {
		case <-m.wrote:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (m *memTransport) waitClosed(t testing.TB) CloseCode {
	t.Helper()
	select {
	case <-m.closed:
	case <-time.After(testTimeout):
		t.Fatal("transport not closed")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.code
}

// memSocket attaches an in-memory socket and ends it at cleanup.
func memSocket(t testing.TB, ep *Endpoint, ser Serializer) (*Socket, *memTransport) {
	t.Helper()
	mt := newMemTransport()
	s, err := ep.Attach(context.Background(), mt, ser, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.End)
	return s, mt
}

func recv(t testing.TB, s *Socket, frame string) {
	t.Helper()
	if err := s.Receive(Frame{Data: []byte(frame)}); err != nil {
		t.Fatalf("receive %s: %v", frame, err)
	}
}
