package testenv

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// echoServer answers every line with the same line until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader, line string) (string, error) {
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

func TestProxyForwardsCutsAndRestores(t *testing.T) {
	p := Proxy(t, echoServer(t))

	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "hello"); err != nil || got != "hello" {
		t.Fatalf("through proxy = %q, %v", got, err)
	}

	p.Cut()
	if _, err := roundTrip(c, r, "after cut"); err == nil {
		t.Fatal("live connection survived the cut")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := roundTrip(c2, bufio.NewReader(c2), "new"); err == nil {
		t.Fatal("new connection was forwarded while cut")
	}

	p.Restore()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, bufio.NewReader(c3), "back"); err != nil || got != "back" {
		t.Fatalf("after restore = %q, %v", got, err)
	}
}

func TestProxyCutsPostgres(t *testing.T) {
	u := PostgresURL(t)
	target, err := HostPort(u)
	if err != nil {
		t.Fatal(err)
	}
	p := Proxy(t, target)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.URL(u))
	if err != nil {
		t.Fatalf("connect through proxy: %v", err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM agent_leases").Scan(&n); err != nil {
		t.Fatalf("query through proxy (search_path to the test schema): %v", err)
	}
	p.Cut()
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&n); err == nil {
		t.Fatal("query succeeded through a cut proxy")
	}
	if _, err := pgx.Connect(ctx, p.URL(u)); err == nil {
		t.Fatal("connect succeeded through a cut proxy")
	} else if errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("connect through a cut proxy hung instead of failing")
	}
	p.Restore()
	conn2, err := pgx.Connect(ctx, p.URL(u))
	if err != nil {
		t.Fatalf("connect after restore: %v", err)
	}
	defer conn2.Close(context.Background())
	if err := conn2.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil || n != 1 {
		t.Fatalf("query after restore = %d, %v", n, err)
	}
}
