package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/relaygw/relay/muster"
	"go.uber.org/zap"
)

// The cluster-wide node statuses behind GET /admin/cluster and the ops page.
//
// In cluster mode every node publishes its NodeStatus (JSON) on
// "<cluster>.ops.status" every CENSUS_INTERVAL and keeps the latest status
// each other node published; a status older than opsStatusAge intervals is
// aged out (the node stopped, crashed or lost NATS). Each node also answers
// admin commands for itself on "<cluster>.ops.node.<node>" (request/reply,
// opsCommand in, opsReply out), so any node's admin API can drain or
// undrain any node of the cluster.

// opsStatusAge is how many CENSUS_INTERVALs a peer's last status is kept.
const opsStatusAge = 3

// opsMaxMessage bounds a status or command message read from NATS.
const opsMaxMessage = 64 << 10

func opsStatusSubject(cluster string) string { return cluster + ".ops.status" }

func opsNodeSubject(cluster, node string) string { return cluster + ".ops.node." + node }

// NodeStatus is one node's compact status: an element of GET /admin/cluster
// and the message nodes publish on "<cluster>.ops.status". 64-bit ids are
// decimal (incarnations) or 16-digit hex (view hashes) strings, so a
// JavaScript reader keeps them exact.
type NodeStatus struct {
	Name string `json:"name"`
	// Owner is the node's lease owner identity, "<name>/<incarnation in
	// base 36>", as session leases and GET /api/sessions/{id} name it.
	Owner string `json:"owner"`
	// Incarnation is the process incarnation (nanoseconds at start), in
	// decimal: the number Owner carries in base 36.
	Incarnation string `json:"incarnation"`
	Mode        string `json:"mode"`
	// Status is "ready", "not_ready" (a readiness check fails: Reasons),
	// "draining" (a drain runs) or "drained" (the drain ended; the process
	// still runs and can be undrained).
	Status   string   `json:"status"`
	Reasons  []string `json:"reasons,omitempty"`
	Sockets  int64    `json:"sockets"`
	Sessions int      `json:"sessions"`
	Leases   Leases   `json:"leases"`
	// Muster is the node's routing scope (absent outside cluster mode).
	Muster *MusterStatus `json:"muster,omitempty"`
	// At is when the node took this status (its clock, RFC 3339).
	At time.Time `json:"at"`
	// AgeMS is how long ago this node received the status, in
	// milliseconds (0 for the answering node's own).
	AgeMS int64 `json:"age_ms"`
}

// Leases counts the session leases of a node: Held now (one per session
// actor), and since the process started: TakeOvers (sessions claimed from a
// previous owner), HandBacks (released by a drain) and StandDowns (actors
// stopped without a clean hand-back: fenced, lease lost).
type Leases struct {
	Held       int    `json:"held"`
	TakeOvers  uint64 `json:"takeovers"`
	HandBacks  uint64 `json:"handbacks"`
	StandDowns uint64 `json:"stand_downs"`
}

// MusterStatus is a node's Muster view: Status ("converging", "ready",
// ..., or "left" once a drain handed the router role back), Ready (Status is "ready"), ViewHash (formatViewHash), the scope's
// Incarnation (decimal; a new one after a restart or an undrain) and the
// member node names, sorted.
type MusterStatus struct {
	Status      string   `json:"status"`
	Ready       bool     `json:"ready"`
	ViewHash    string   `json:"view_hash"`
	Incarnation string   `json:"incarnation"`
	Members     []string `json:"members"`
}

// formatViewHash is the one text form of a Muster view hash, in the admin
// API as in the node's logs: 16 lower-case hex digits, zero-padded.
func formatViewHash(h uint64) string { return muster.FormatViewHash(h) }

// Status reports the node's NodeStatus now.
func (n *Node) Status() NodeStatus {
	sessions := len(n.manager.Sessions())
	ms := n.manager.Stats()
	st := NodeStatus{
		Name: n.name, Owner: n.Owner(), Incarnation: strconv.FormatUint(n.incarnationNum, 10), Mode: n.mode,
		Sockets: n.endpoint.Stats().SocketsOpen, Sessions: sessions,
		Leases: Leases{Held: sessions, TakeOvers: ms.Takeovers, HandBacks: ms.HandBacks, StandDowns: ms.StandDowns},
		At:     time.Now().UTC(),
	}
	n.drainMu.Lock()
	drained := n.drained
	n.drainMu.Unlock()
	ok, reasons := n.readiness.state()
	switch {
	case n.draining.Load() && drained:
		st.Status = "drained"
	case n.draining.Load():
		st.Status = "draining"
	case !ok:
		st.Status, st.Reasons = "not_ready", reasons
	default:
		st.Status = "ready"
	}
	if n.scope != nil {
		status := n.scope.Status().String()
		if n.scope.Draining() {
			status = "left" // handed its router role back: peers no longer count it
		}
		st.Muster = &MusterStatus{
			Status: status, Ready: status == "ready", ViewHash: formatViewHash(n.scope.ViewHash()),
			Incarnation: strconv.FormatUint(n.scope.Incarnation(), 10), Members: n.scope.Members(),
		}
	}
	return st
}

// opsStatus keeps the latest status of every other node.
type opsStatus struct {
	n      *Node
	every  time.Duration
	mu     sync.Mutex
	peers  map[string]peerStatus // by node name
	stop   chan struct{}
	done   chan struct{}
	unsubs []*nats.Subscription
}

type peerStatus struct {
	st   NodeStatus
	seen time.Time
}

// startOpsStatus starts publishing and collecting statuses (cluster mode
// only; otherwise the cluster is this node alone).
func (n *Node) startOpsStatus() error {
	o := &opsStatus{n: n, every: n.cfg.CensusInterval, peers: map[string]peerStatus{}, stop: make(chan struct{}), done: make(chan struct{})}
	n.ops = o
	if n.nc == nil {
		close(o.done)
		return nil
	}
	sub, err := n.nc.Subscribe(opsStatusSubject(n.cfg.Cluster), o.receive)
	if err != nil {
		return fmt.Errorf("gateway: ops status: %w", err)
	}
	cmd, err := n.nc.Subscribe(opsNodeSubject(n.cfg.Cluster, n.name), o.command)
	if err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("gateway: ops commands: %w", err)
	}
	o.unsubs = []*nats.Subscription{sub, cmd}
	go o.loop()
	n.closers = append(n.closers, o.close)
	return nil
}

func (o *opsStatus) close() {
	close(o.stop)
	<-o.done
	for _, s := range o.unsubs {
		_ = s.Unsubscribe()
	}
}

func (o *opsStatus) loop() {
	defer close(o.done)
	t := time.NewTicker(o.every)
	defer t.Stop()
	for {
		o.publish()
		select {
		case <-o.stop:
			return
		case <-t.C:
		}
	}
}

func (o *opsStatus) publish() {
	b, err := json.Marshal(o.n.Status())
	if err == nil {
		err = o.n.nc.Publish(opsStatusSubject(o.n.cfg.Cluster), b)
	}
	if err != nil {
		o.n.log.Debug("ops status not published", zap.Error(err))
	}
}

// receive keeps a peer's status. A message that does not decode, names no
// node or names this one is dropped.
func (o *opsStatus) receive(m *nats.Msg) { o.accept(m.Data, time.Now()) }

// accept decodes and keeps one status message received at now; it reports
// whether the message was kept. Refused: more than opsMaxMessage bytes, not
// a NodeStatus JSON object, no name or a name over 253 bytes, or this
// node's own name.
func (o *opsStatus) accept(b []byte, now time.Time) bool {
	if len(b) > opsMaxMessage {
		return false
	}
	var st NodeStatus
	if err := json.Unmarshal(b, &st); err != nil || st.Name == "" || len(st.Name) > 253 || st.Name == o.n.name {
		return false
	}
	st.AgeMS = 0
	o.mu.Lock()
	o.peers[st.Name] = peerStatus{st: st, seen: now}
	o.mu.Unlock()
	o.n.tracer.Emit("ops.status", "node", o.n.name, "from", st.Name, "status", st.Status)
	return true
}

// cluster returns this node's status and every peer status younger than
// opsStatusAge intervals, sorted by node name; older ones are forgotten.
func (o *opsStatus) cluster() []NodeStatus { return o.view(o.n.Status(), time.Now()) }

// view is cluster with this node's status self, at now.
func (o *opsStatus) view(self NodeStatus, now time.Time) []NodeStatus {
	out := []NodeStatus{self}
	o.mu.Lock()
	for name, p := range o.peers {
		if now.Sub(p.seen) > opsStatusAge*o.every {
			delete(o.peers, name)
			continue
		}
		st := p.st
		st.AgeMS = now.Sub(p.seen).Milliseconds()
		out = append(out, st)
	}
	o.mu.Unlock()
	slices.SortFunc(out, func(a, b NodeStatus) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// opsCommand is a request on "<cluster>.ops.node.<node>": Op is "drain" or
// "undrain".
type opsCommand struct {
	Op string `json:"op"`
}

// opsReply answers an opsCommand: the node's status after it, or Error (an
// error code: invalid_command, drain_running, or internal).
type opsReply struct {
	Status  *NodeStatus `json:"status,omitempty"`
	Error   string      `json:"error,omitempty"`
	Message string      `json:"message,omitempty"`
}

func (o *opsStatus) command(m *nats.Msg) {
	var c opsCommand
	if len(m.Data) > opsMaxMessage || json.Unmarshal(m.Data, &c) != nil {
		c.Op = ""
	}
	st, ae := o.n.runOp(c.Op)
	rep := opsReply{}
	if ae != nil {
		rep.Error, rep.Message = ae.Code, ae.Message
	} else {
		rep.Status = &st
	}
	b, _ := json.Marshal(rep)
	if err := m.Respond(b); err != nil {
		o.n.log.Debug("ops command reply not sent", zap.Error(err))
	}
}

// runOp runs a drain or undrain on this node and returns its status.
func (n *Node) runOp(op string) (NodeStatus, *apiError) {
	switch op {
	case "drain":
		n.startDrain()
	case "undrain":
		if err := n.Undrain(); err != nil {
			if errors.Is(err, errDrainRunning) {
				return NodeStatus{}, errorf(409, CodeDrainRunning, "the drain is still running; undrain once it has ended (status drained)")
			}
			return NodeStatus{}, errorf(500, CodeInternal, "undrain failed: "+err.Error())
		}
	default:
		return NodeStatus{}, errorf(400, CodeInvalidCommand, `op must be "drain" or "undrain"`)
	}
	return n.Status(), nil
}
