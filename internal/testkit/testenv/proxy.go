package testenv

import (
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TCPProxy forwards TCP connections from a listener on 127.0.0.1 to a
// target address. Cut simulates an outage of the target: live connections
// are closed and new ones are accepted and closed at once, so clients see a
// reset rather than a hang; Restore resumes forwarding. Stall simulates a
// target that stops answering: connections stay open but no byte is
// forwarded either way until Resume. Safe for concurrent use.
type TCPProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cut     bool
	closed  bool
	stalled bool
	flowing *sync.Cond // signaled when stalled turns false, or on Cut and Close
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup

	delay atomic.Int64 // ns added to every byte from the target to the client
}

// SetDelay makes every byte the target sends reach the client d later
// (latency, with the byte order kept); 0 removes it. It applies to bytes
// read from then on, on live and new connections.
func (p *TCPProxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Proxy starts a proxy to target ("host:port") and closes it when the test
// ends.
func Proxy(t testing.TB, target string) *TCPProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: proxy listen: %v", err)
	}
	p := &TCPProxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.flowing = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's "127.0.0.1:port".
func (p *TCPProxy) Addr() string { return p.ln.Addr().String() }

// URL returns rawURL with its host:port replaced by the proxy's address, so
// a client built from it goes through the proxy. A URL that does not parse
// is returned unchanged.
func (p *TCPProxy) URL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	u.Host = p.Addr()
	return u.String()
}

// Cut closes every live connection and refuses new ones until Restore.
func (p *TCPProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.closeConnsLocked()
	p.flowing.Broadcast()
}

// Stall holds every byte the proxy reads, both ways, on live and new
// connections, until Resume: the target looks alive (connected) but stalled.
func (p *TCPProxy) Stall() {
	p.mu.Lock()
	p.stalled = true
	p.mu.Unlock()
}

// Resume forwards the bytes held since Stall, and the rest.
func (p *TCPProxy) Resume() {
	p.mu.Lock()
	p.stalled = false
	p.flowing.Broadcast()
	p.mu.Unlock()
}

// waitFlowing blocks while the proxy is stalled (and not cut or closed).
func (p *TCPProxy) waitFlowing() {
	p.mu.Lock()
	for p.stalled && !p.cut && !p.closed {
		p.flowing.Wait()
	}
	p.mu.Unlock()
}

// copyFlowing copies src to dst like io.Copy, holding each chunk while the
// proxy is stalled.
func (p *TCPProxy) copyFlowing(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.waitFlowing()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Restore forwards new connections again.
func (p *TCPProxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops the proxy, closes every connection and waits for its
// goroutines. It is idempotent.
func (p *TCPProxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	_ = p.ln.Close()
	p.closeConnsLocked()
	p.flowing.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *TCPProxy) closeConnsLocked() {
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// track registers c unless the proxy is cut or closed.
func (p *TCPProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut || p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *TCPProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *TCPProxy) acceptLoop() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if !p.track(client) {
			_ = client.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

func (p *TCPProxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(server) {
		_ = server.Close()
		return
	}
	defer p.untrack(server)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.copyFlowing(server, client)
		// The client finished sending: pass the half-close on.
		if tc, ok := server.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	p.copyDelayed(client, server)
	_ = client.Close()
	<-done
}

// copyDelayed copies src to dst like io.Copy, holding each chunk until
// SetDelay's latency has passed since it was read, and while the proxy is
// stalled (copyFlowing).
func (p *TCPProxy) copyDelayed(dst io.Writer, src io.Reader) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	chunks := make(chan chunk, 4096)
	go func() {
		defer close(chunks)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{append([]byte(nil), buf[:n]...), time.Now().Add(time.Duration(p.delay.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	failed := false
	for c := range chunks {
		if failed {
			continue // drain, so the reader ends when src closes
		}
		if w := time.Until(c.at); w > 0 {
			time.Sleep(w)
		}
		p.waitFlowing()
		if _, err := dst.Write(c.b); err != nil {
			failed = true
			if cl, ok := src.(io.Closer); ok {
				_ = cl.Close()
			}
		}
	}
}

// HostPort returns the "host:port" of a service URL (for Proxy's target).
func HostPort(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}
