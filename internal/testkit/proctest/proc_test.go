package proctest

import (
	"context"
	"errors"
	"net/http"
	"os"
	"testing"
	"time"
)

func startHelper(t *testing.T, name string) *Proc {
	t.Helper()
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p := NewProc(name, addr, os.Args[0], []string{helperEnv + "=1", "ADDR=" + addr, "NODE_NAME=" + name})
	t.Cleanup(p.Stop)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return p
}

func readyz(p *Proc) (int, error) {
	return NewClient("", "").Status(context.Background(), p.URL(), "/readyz")
}

func TestProcLifecycleSignalsAndLogs(t *testing.T) {
	p := startHelper(t, "n1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.Logs().WaitFor(ctx, 0, Msg("listening", "node", "n1")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Logs().WaitFor(ctx, 0, Contains("plain stdout line")); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Start = %v, want ErrRunning", err)
	}

	// A paused process keeps its listener but answers nothing.
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	short, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := NewClient("", "").Status(short, p.URL(), "/readyz")
	scancel()
	if err == nil {
		t.Fatal("a paused process answered /readyz")
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	if code, err := readyz(p); err != nil || code != http.StatusOK {
		t.Fatalf("readyz after resume = %d, %v", code, err)
	}

	// SIGTERM: readiness goes false while the process still runs.
	from := p.Logs().Len()
	if err := p.Terminate(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Logs().WaitFor(ctx, from, Msg("draining")); err != nil {
		t.Fatal(err)
	}
	if code, err := readyz(p); err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("readyz while draining = %d, %v", code, err)
	}
	if !p.Running() {
		t.Fatal("process gone after the first SIGTERM")
	}
	if err := p.Terminate(); err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Success() {
		t.Fatalf("exit state %v, want 0", st)
	}
	// The unterminated last line is kept.
	if p.Logs().Count(from, Msg("stopped")) != 1 {
		t.Fatalf("last line missing:\n%s", tail(p.Logs().Lines(), 10))
	}
	if err := p.Kill(); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Kill after exit = %v, want ErrNotRunning", err)
	}

	// A restart keeps the address and appends to the same log.
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Starts() != 2 || p.Logs().Count(0, Msg("listening")) != 2 {
		t.Fatalf("starts %d, listening lines %d", p.Starts(), p.Logs().Count(0, Msg("listening")))
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if st := p.ExitState(); st == nil || st.Success() {
		t.Fatalf("exit state after SIGKILL = %v", st)
	}
}

func TestStopKillsAPausedProcess(t *testing.T) {
	p := startHelper(t, "n2")
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	if p.Running() {
		t.Fatal("still running after Stop")
	}
	p.Stop() // no-op
}

func TestWaitReadyFailsWhenTheProcessExits(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	// The helper cannot listen on an address it cannot parse and exits 2.
	p := NewProc("bad", addr, os.Args[0], []string{helperEnv + "=1", "ADDR=not-an-address"})
	t.Cleanup(p.Stop)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.WaitReady(ctx); !errors.Is(err, ErrExited) {
		t.Fatalf("WaitReady = %v, want ErrExited", err)
	}
}

func TestLogsWaitForOnlyLooksFromTheGivenLine(t *testing.T) {
	l := newLogs()
	l.Add(`{"msg":"a","k":"1"}`)
	from := l.Len()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.WaitFor(ctx, from, Msg("a")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitFor matched a line before from: %v", err)
	}
	done := make(chan string, 1)
	go func() {
		line, _ := l.WaitFor(context.Background(), from, Msg("a", "k", "2"))
		done <- line
	}()
	l.Add(`{"msg":"a","k":"3"}`)
	l.Add("not json")
	l.Add(`{"msg":"a","k":"2"}`)
	if got := <-done; got != `{"msg":"a","k":"2"}` {
		t.Fatalf("WaitFor = %q", got)
	}
	if n := l.Count(0, Msg("a")); n != 3 {
		t.Fatalf("Count = %d, want 3", n)
	}
	if len(l.Races()) != 0 {
		t.Fatal("races in a clean log")
	}
	l.Add("WARNING: DATA RACE")
	if len(l.Races()) != 1 {
		t.Fatal("race report not found")
	}
}
