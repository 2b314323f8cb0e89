package natstransport_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/muster/memnet/transporttest"
	"github.com/relaygw/relay/muster/natstransport"
)

// newNetwork gives every node its own connection to the real NATS server,
// all under one test prefix.
func newNetwork(t *testing.T) func(string) muster.Transport {
	prefix := testenv.NATSPrefix(t)
	return func(name string) muster.Transport {
		return natstransport.New(testenv.NATSConn(t), natstransport.Config{Prefix: prefix, Scope: "s", Node: name})
	}
}

func TestContract(t *testing.T) { transporttest.Run(t, newNetwork) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSubjectsAndSenderHeader(t *testing.T) {
	nc, prefix := testenv.NATS(t)
	ctx := ctxT(t)
	inbox, err := nc.SubscribeSync(prefix + ".s.node.b")
	if err != nil {
		t.Fatal(err)
	}
	bcast, err := nc.SubscribeSync(prefix + ".s.bcast")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	a := natstransport.New(testenv.NATSConn(t), natstransport.Config{Prefix: prefix, Scope: "s", Node: "a"})
	a.Register(transporttest.NewRecorder())
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	if err := a.Send(ctx, "b", []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := a.Broadcast(ctx, []byte("all")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sub  *nats.Subscription
		data string
	}{{inbox, "one"}, {bcast, "all"}} {
		m, err := c.sub.NextMsgWithContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Data) != c.data || m.Header.Get(natstransport.HeaderFrom) != "a" {
			t.Fatalf("%s: data %q from %q", m.Subject, m.Data, m.Header.Get(natstransport.HeaderFrom))
		}
	}
}

func TestBadNames(t *testing.T) {
	nc, prefix := testenv.NATS(t)
	ctx := ctxT(t)
	for _, cfg := range []natstransport.Config{
		{Prefix: prefix, Scope: "s", Node: "a.b"},
		{Prefix: prefix, Scope: "s", Node: ""},
		{Prefix: prefix, Scope: "s*", Node: "a"},
		{Prefix: "", Scope: "s", Node: "a"},
		{Prefix: prefix + "..x", Scope: "s", Node: "a"},
	} {
		tr := natstransport.New(nc, cfg)
		tr.Register(transporttest.NewRecorder())
		if err := tr.Start(ctx); !errors.Is(err, natstransport.ErrBadName) {
			t.Errorf("Start(%+v) = %v; want ErrBadName", cfg, err)
		}
		_ = tr.Close()
	}
	a := natstransport.New(nc, natstransport.Config{Prefix: prefix + ".x", Scope: "s", Node: "a"})
	if err := a.Start(ctx); !errors.Is(err, natstransport.ErrNoHandler) {
		t.Fatalf("start without handler = %v", err)
	}
	a.Register(transporttest.NewRecorder())
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Start(ctx); !errors.Is(err, natstransport.ErrAlreadyStarted) {
		t.Fatalf("second start = %v", err)
	}
	if err := a.Send(ctx, "b.c", nil); !errors.Is(err, natstransport.ErrBadName) {
		t.Fatalf("send to bad name = %v", err)
	}
}

func startServer(t *testing.T, port int) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded NATS server did not start")
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// TestSurvivesReconnect restarts an embedded server on the same port and
// checks that the transports' subscriptions work again afterwards.
func TestSurvivesReconnect(t *testing.T) {
	srv := startServer(t, -1)
	port := srv.Addr().(*net.TCPAddr).Port
	ctx := ctxT(t)
	reconnected := make(chan struct{}, 2)
	connect := func() *nats.Conn {
		nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
			nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	nca, ncb := connect(), connect()
	ra, rb := transporttest.NewRecorder(), transporttest.NewRecorder()
	a := natstransport.New(nca, natstransport.Config{Prefix: "p", Scope: "s", Node: "a"})
	a.Register(ra)
	b := natstransport.New(ncb, natstransport.Config{Prefix: "p", Scope: "s", Node: "b"})
	b.Register(rb)
	for _, tr := range []*natstransport.Transport{a, b} {
		if err := tr.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close() })
	}
	if _, err := a.Call(ctx, "b", []byte("before")); err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	startServer(t, port)
	for range 2 {
		select {
		case <-reconnected:
		case <-ctx.Done():
			t.Fatal("clients did not reconnect")
		}
	}
	// The subscriptions were re-sent on reconnect; a flush makes sure the
	// server has them.
	for _, nc := range []*nats.Conn{nca, ncb} {
		if err := nc.FlushWithContext(ctx); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := a.Call(ctx, "b", []byte("after"))
	if err != nil || string(resp) != "re:after" {
		t.Fatalf("call after reconnect = %q, %v", resp, err)
	}
	if err := b.Broadcast(ctx, []byte("bc")); err != nil {
		t.Fatal(err)
	}
	got, err := ra.WaitN(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []transporttest.Msg{{From: "b", Data: "bc"}}) {
		t.Fatalf("a got %v", got)
	}
}
