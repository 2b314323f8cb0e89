package proctest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Errors of process control.
var (
	// ErrNotRunning means the node has no running process (never started,
	// or exited).
	ErrNotRunning = errors.New("proctest: node is not running")
	// ErrRunning means Start was called while the node still runs.
	ErrRunning = errors.New("proctest: node is already running")
	// ErrExited means the process exited while something waited for it to
	// become ready.
	ErrExited = errors.New("proctest: node exited")
)

// Proc is one gateway node: a name, a fixed listen address and an
// environment, run as successive processes (incarnations) by Start. The
// address stays the same across restarts, as behind a load balancer.
// Safe for concurrent use.
type Proc struct {
	name string
	addr string
	bin  string
	env  []string
	logs *Logs

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the current incarnation has exited
	state   *os.ProcessState
	paused  bool
	starts  int
	stdout  *lineWriter
	stderr  *lineWriter
	started time.Time
}

// NewProc returns a node that runs bin with env (KEY=value entries, added to
// this process's environment) listening on addr. It does not start it.
func NewProc(name, addr, bin string, env []string) *Proc {
	return &Proc{name: name, addr: addr, bin: bin, env: env, logs: newLogs(), exited: closedChan()}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Name returns the node name (NODE_NAME).
func (p *Proc) Name() string { return p.name }

// Addr returns the listen address "127.0.0.1:port".
func (p *Proc) Addr() string { return p.addr }

// URL returns "http://" + Addr.
func (p *Proc) URL() string { return "http://" + p.addr }

// Logs returns the node's log lines, all incarnations.
func (p *Proc) Logs() *Logs { return p.logs }

// Starts returns how many processes Start has launched.
func (p *Proc) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// Start launches a new incarnation. It does not wait for readiness (see
// WaitReady). Errors: ErrRunning, or the exec error.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.exited:
	default:
		return ErrRunning
	}
	p.starts++
	p.logs.Add(fmt.Sprintf("--- proctest: %s incarnation %d starting on %s ---", p.name, p.starts, p.addr))
	cmd := exec.Command(p.bin)
	cmd.Env = append(os.Environ(), p.env...)
	p.stdout, p.stderr = &lineWriter{logs: p.logs}, &lineWriter{logs: p.logs}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = 2 * time.Second
	exited := make(chan struct{})
	stdout, stderr := p.stdout, p.stderr
	startErr := make(chan error, 1)
	go func() {
		// On Linux the child gets SIGKILL when the thread that started it
		// ends (Pdeathsig), and the Go runtime may end a thread. This
		// goroutine keeps its thread for the child's life: it starts the
		// child, waits for it, and only then returns (ending the thread, as
		// it stays locked).
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			startErr <- err
			return
		}
		startErr <- nil
		_ = cmd.Wait()
		stdout.flush()
		stderr.flush()
		p.mu.Lock()
		p.state = cmd.ProcessState
		p.mu.Unlock()
		p.logs.Add(fmt.Sprintf("--- proctest: %s incarnation exited: %v ---", p.name, cmd.ProcessState))
		close(exited)
	}()
	if err := <-startErr; err != nil {
		return fmt.Errorf("proctest: start %s: %w", p.name, err)
	}
	p.cmd, p.exited, p.state, p.paused, p.started = cmd, exited, nil, false, time.Now()
	return nil
}

// Running reports whether an incarnation is running (paused counts).
func (p *Proc) Running() bool {
	select {
	case <-p.Exited():
		return false
	default:
		return true
	}
}

// Exited returns a channel closed when the current incarnation has exited
// (already closed when none runs).
func (p *Proc) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// ExitState returns the last incarnation's exit state (nil while running
// or before the first start).
func (p *Proc) ExitState() *os.ProcessState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// Signal sends sig to the running incarnation.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.exited:
		return ErrNotRunning
	default:
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("proctest: %s: signal %v: %w", p.name, sig, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	return nil
}

// Kill sends SIGKILL and waits until the process is gone.
func (p *Proc) Kill() error {
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.Exited()
	return nil
}

// Pause sends SIGSTOP and waits until every thread of the process has
// stopped (on Linux; see waitStopped): the process stays alive (sockets
// open, NATS subscriptions registered) but runs nothing until Resume.
func (p *Proc) Pause() error {
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	p.mu.Lock()
	pid := p.cmd.Process.Pid
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	return waitStopped(ctx, pid)
}

// Resume sends SIGCONT.
func (p *Proc) Resume() error { return p.Signal(syscall.SIGCONT) }

// Terminate sends SIGTERM (the gateway drains, then exits). It does not
// wait; see Wait.
func (p *Proc) Terminate() error { return p.Signal(syscall.SIGTERM) }

// Wait waits until the current incarnation exits and returns its state.
func (p *Proc) Wait(ctx context.Context) (*os.ProcessState, error) {
	select {
	case <-p.Exited():
		return p.ExitState(), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("proctest: %s: waiting for exit: %w", p.name, ctx.Err())
	}
}

// WaitReady polls GET /readyz until it answers 200, the process exits
// (ErrExited) or ctx ends.
func (p *Proc) WaitReady(ctx context.Context) error {
	client := &http.Client{Timeout: time.Second}
	exited := p.Exited()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL()+"/readyz", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-exited:
			t.Stop()
			return fmt.Errorf("%w before it was ready: %s", ErrExited, p.name)
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("proctest: %s not ready: %w", p.name, ctx.Err())
		case <-t.C:
		}
	}
}

// Stop ends the running incarnation: it resumes a paused process, kills it
// and waits. It is a no-op when nothing runs.
func (p *Proc) Stop() {
	p.mu.Lock()
	paused := p.paused
	p.mu.Unlock()
	if paused {
		_ = p.Resume()
	}
	if err := p.Kill(); err != nil {
		<-p.Exited()
	}
}
