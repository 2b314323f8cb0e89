package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/session"
	"go.uber.org/zap"
)

// NodeInfo is the GET /admin/node response.
type NodeInfo struct {
	Name  string `json:"name"`
	Owner string `json:"owner"`
	// Incarnation is the process incarnation in decimal (a string: it does
	// not fit a JavaScript number); Owner carries it in base 36.
	Incarnation string `json:"incarnation"`
	Mode        string `json:"mode"`
	Ready       bool   `json:"ready"`
	Draining    bool   `json:"draining"`
	Sockets     int64  `json:"sockets"`
	Sessions    int    `json:"sessions"`
	// Cluster is the node's Muster view: status ("ready", "rebalancing",
	// ...), view hash (hex) and member node names, sorted. Nodes agree on
	// routing once each is ready with the same view hash.
	Cluster *ClusterInfo `json:"cluster,omitempty"`
}

// ClusterInfo is the Muster part of NodeInfo; ViewHash is formatViewHash's
// 16 hex digits, as in /admin/muster and /admin/cluster.
type ClusterInfo struct {
	Status   string   `json:"status"`
	ViewHash string   `json:"view_hash"`
	Members  []string `json:"members"`
}

// Ready reports what /readyz answers: not draining and the last probe
// rounds passed.
func (n *Node) Ready() bool {
	ok, _ := n.readiness.state()
	return ok && !n.draining.Load()
}

// Info describes the node for operators.
func (n *Node) Info() NodeInfo {
	return NodeInfo{
		Name: n.name, Owner: n.Owner(), Incarnation: strconv.FormatUint(n.incarnationNum, 10), Mode: n.mode,
		Ready: n.Ready(), Draining: n.draining.Load(),
		Sockets: n.endpoint.Stats().SocketsOpen, Sessions: len(n.manager.Sessions()),
		Cluster: n.clusterInfo(),
	}
}

func (n *Node) clusterInfo() *ClusterInfo {
	if n.scope == nil {
		return nil
	}
	return &ClusterInfo{
		Status:   n.scope.Status().String(),
		ViewHash: formatViewHash(n.scope.ViewHash()),
		Members:  n.scope.Members(),
	}
}

func (n *Node) handleAdminNode(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, n.Info())
}

func (n *Node) handleAdminSessions(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"node": n.name, "sessions": n.manager.Sessions()})
}

// handleAdminDrain starts a drain without stopping the process; it answers
// 202 at once and the drain runs within the drain window.
func (n *Node) handleAdminDrain(w http.ResponseWriter, _ *http.Request) {
	n.startDrain()
	writeJSON(w, http.StatusAccepted, map[string]any{"node": n.name, "draining": true})
}

// startDrain starts a drain within DRAIN_WINDOW and returns once the node is
// draining (its Status says so; an undrain from then on is refused with
// drain_running until the drain ends); the drain itself runs in the
// background. A no-op while one runs or after it ended, until an undrain.
func (n *Node) startDrain() {
	if started, _ := n.beginDrain(); !started {
		return
	}
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.DrainWindow)
		defer cancel()
		_ = n.drain(ctx)
	}()
}

// handleAdminMuster serves the Muster scope's dump: status, view hash,
// members, peers' views, claim states and occupancy (JSON; ?format=text for
// the text form).
func (n *Node) handleAdminMuster(w http.ResponseWriter, r *http.Request) {
	d := n.scope.Dump()
	if r.URL.Query().Get("format") == "text" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(d.String()))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"node": n.name, "pubsub": n.pubsub.Counts(), "muster": musterDumpJSON(d)})
}

// Error codes of the cluster admin routes (README "HTTP API").
const (
	CodeDrainRunning    = "drain_running"    // 409: undrain while the drain still runs
	CodeInvalidCommand  = "invalid_command"  // 400: an ops command other than drain or undrain
	CodeNodeNotFound    = "node_not_found"   // 404: no node of that name published a status lately
	CodeNodeUnreachable = "node_unreachable" // 504: the node did not answer the command over NATS
)

// errDrainRunning refuses an undrain while the drain still runs.
var errDrainRunning = errors.New("gateway: the drain is still running")

// drainEnded marks the running drain as ended (Drain's last step).
func (n *Node) drainEnded() {
	n.drainMu.Lock()
	n.drained = true
	close(n.drainDone)
	n.drainMu.Unlock()
	n.tracer.Emit("gateway.drained", "node", n.name)
}

// Undrain ends an ended drain without a restart: the endpoint takes sockets
// again, the session manager takes events and claims sessions, the Muster
// scope restarts with a fresh incarnation and rejoins the cluster (routing
// converges as for a new node), and readiness follows the probes again.
// Sessions handed back during the drain stay with the nodes that took them.
// It returns errDrainRunning while Drain has not returned, and is a no-op
// when the node is not draining. A process that is stopping (SIGTERM) exits
// anyway.
func (n *Node) Undrain() error {
	n.drainMu.Lock()
	defer n.drainMu.Unlock()
	if !n.draining.Load() {
		return nil
	}
	if !n.drained {
		return errDrainRunning
	}
	if err := n.manager.Undrain(); err != nil {
		return fmt.Errorf("gateway: undrain: %w", err)
	}
	n.endpoint.Resume()
	if n.scope != nil {
		if err := n.scope.Rejoin(); err != nil {
			return fmt.Errorf("gateway: undrain: %w", err)
		}
	}
	n.drained = false
	n.draining.Store(false)
	n.log.Info("undrained: taking sockets, events and sessions again")
	n.tracer.Emit("gateway.undrained", "node", n.name)
	return nil
}

// mountAdminOps adds the cluster-wide admin routes the ops page uses
// (inside the /admin route group, behind the admin token):
//
//	GET  /admin/cluster                 every node's NodeStatus
//	POST /admin/undrain                 undrain this node
//	POST /admin/nodes/{node}/drain      drain any node of the cluster
//	POST /admin/nodes/{node}/undrain    undrain any node of the cluster
//	GET  /admin/stats                   counters and a latency histogram for charts
//	GET  /admin/sessions/{id}           one session: lease, position, viewers per node
func (n *Node) mountAdminOps(r chi.Router) {
	r.Get("/cluster", n.handleAdminCluster)
	r.Post("/undrain", n.handleAdminUndrain)
	r.Post("/nodes/{node}/drain", n.handleAdminNodeOp("drain"))
	r.Post("/nodes/{node}/undrain", n.handleAdminNodeOp("undrain"))
	r.Get("/stats", n.handleAdminStats)
	r.Get("/sessions/{id}", n.handleAdminSession)
}

// ClusterView is the GET /admin/cluster response: Nodes holds this node's
// status, read now, and the latest one each other node published within
// the last 3 CENSUS_INTERVALs (IntervalMS), sorted by name.
type ClusterView struct {
	Node       string       `json:"node"`
	IntervalMS int64        `json:"interval_ms"`
	Nodes      []NodeStatus `json:"nodes"`
}

func (n *Node) handleAdminCluster(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, ClusterView{Node: n.name, IntervalMS: n.cfg.CensusInterval.Milliseconds(), Nodes: n.ops.cluster()})
}

// handleAdminUndrain answers POST /admin/undrain: 200 with the node's
// status, 409 drain_running while the drain still runs.
func (n *Node) handleAdminUndrain(w http.ResponseWriter, _ *http.Request) {
	st, ae := n.runOp("undrain")
	if ae != nil {
		writeError(w, ae)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// handleAdminNodeOp answers POST /admin/nodes/{node}/drain|undrain: this
// node runs it itself, any other node is asked over NATS
// ("<cluster>.ops.node.<node>", bounded by FORWARD_TIMEOUT). 200 with the
// node's status after the command (a drain has started, not ended), 404
// node_not_found for a node that published no status lately, 504
// node_unreachable when it does not answer, 409 drain_running for an undrain
// during the drain.
func (n *Node) handleAdminNodeOp(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { n.adminNodeOp(w, r, op) }
}

func (n *Node) adminNodeOp(w http.ResponseWriter, r *http.Request, op string) {
	name := chi.URLParam(r, "node")
	if name == n.name {
		st, ae := n.runOp(op)
		if ae != nil {
			writeError(w, ae)
			return
		}
		writeJSON(w, http.StatusOK, st)
		return
	}
	known := false
	for _, st := range n.ops.cluster() {
		known = known || st.Name == name
	}
	if !known || n.nc == nil {
		writeError(w, errorf(http.StatusNotFound, CodeNodeNotFound, "no node named "+strconv.Quote(name)+" published a status lately"))
		return
	}
	req, _ := json.Marshal(opsCommand{Op: op})
	msg, err := n.nc.RequestWithContext(r.Context(), opsNodeSubject(n.cfg.Cluster, name), req)
	if err != nil {
		writeError(w, errorf(http.StatusGatewayTimeout, CodeNodeUnreachable, name+" did not answer: "+err.Error()))
		return
	}
	var rep opsReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil || (rep.Status == nil && rep.Error == "") {
		writeError(w, errorf(http.StatusBadGateway, CodeInternal, name+" answered something unreadable"))
		return
	}
	if rep.Error != "" {
		status := http.StatusInternalServerError
		switch rep.Error {
		case CodeDrainRunning:
			status = http.StatusConflict
		case CodeInvalidCommand:
			status = http.StatusBadRequest
		}
		writeError(w, errorf(status, rep.Error, rep.Message))
		return
	}
	writeJSON(w, http.StatusOK, rep.Status)
}

// Stats is the GET /admin/stats response, what the ops page charts: this
// node's counters (cumulative since start) and the event acceptance latency
// histogram (cumulative bucket counts; le in seconds, the +Inf bucket is
// Count), read from the node's Prometheus registry at AtMS (the node's
// clock, Unix milliseconds). Rates and quantiles come from the difference
// of two reads.
type Stats struct {
	Node     string           `json:"node"`
	AtMS     int64            `json:"at_ms"`
	Counters map[string]int64 `json:"counters"`
	// AcceptLatency is relay_event_accept_duration_seconds.
	AcceptLatency Histogram `json:"accept_latency"`
}

// Histogram is a Prometheus histogram's state: Count observations summing
// to Sum seconds, Buckets cumulative by upper bound.
type Histogram struct {
	Count   uint64   `json:"count"`
	Sum     float64  `json:"sum"`
	Buckets []Bucket `json:"buckets"`
}

// Bucket counts the observations at or below LE seconds.
type Bucket struct {
	LE    float64 `json:"le"`
	Count uint64  `json:"count"`
}

// statsCounters are the counters GET /admin/stats reports, by metric name.
var statsCounters = []string{"relay_deliveries_total", "relay_events_accepted_total", "relay_events_published_total", "relay_replayed_events_total"}

// Stats reads the node's chart counters from its metrics registry.
func (n *Node) Stats() (Stats, error) {
	fams, err := n.metrics.reg.Gather()
	if err != nil {
		return Stats{}, err
	}
	out := Stats{Node: n.name, AtMS: time.Now().UnixMilli(), Counters: map[string]int64{}, AcceptLatency: Histogram{Buckets: []Bucket{}}}
	for _, name := range statsCounters {
		out.Counters[name] = 0
	}
	for _, f := range fams {
		name := f.GetName()
		if slices.Contains(statsCounters, name) {
			var sum float64
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			out.Counters[name] = int64(sum)
		}
		if name == "relay_event_accept_duration_seconds" && len(f.GetMetric()) > 0 {
			h := f.GetMetric()[0].GetHistogram()
			out.AcceptLatency.Count, out.AcceptLatency.Sum = h.GetSampleCount(), h.GetSampleSum()
			for _, b := range h.GetBucket() {
				if !math.IsInf(b.GetUpperBound(), 1) {
					out.AcceptLatency.Buckets = append(out.AcceptLatency.Buckets, Bucket{LE: b.GetUpperBound(), Count: b.GetCumulativeCount()})
				}
			}
		}
	}
	return out, nil
}

func (n *Node) handleAdminStats(w http.ResponseWriter, _ *http.Request) {
	st, err := n.Stats()
	if err != nil {
		n.log.Warn("metrics gather failed", zap.Error(err))
		writeError(w, errorf(http.StatusInternalServerError, CodeInternal, "metrics could not be read"))
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// SessionLookup is the GET /admin/sessions/{id} response. Epoch and Seq
// (the session's last event, from the owner's live state or the session
// store) and LeaseEpoch are decimal strings. Owner is the live lease holder
// ("" when none), OwnerNode its node name. Viewers counts the sockets
// joined on the session's topic per node (Census: this node's now, the
// others' as last broadcast), ViewersTotal their sum.
type SessionLookup struct {
	Session      string         `json:"session"`
	Owner        string         `json:"owner"`
	OwnerNode    string         `json:"owner_node"`
	LeaseEpoch   string         `json:"lease_epoch"`
	LeaseLeftMS  int64          `json:"lease_left_ms"`
	Epoch        string         `json:"epoch"`
	Seq          string         `json:"seq"`
	Running      bool           `json:"running"`
	Pending      int            `json:"pending"`
	Viewers      map[string]int `json:"viewers"`
	ViewersTotal int            `json:"viewers_total"`
}

// handleAdminSession answers GET /admin/sessions/{id}: 200 SessionLookup
// (a session never seen answers epoch "0", seq "0", no owner), 400
// invalid_session_id.
func (n *Node) handleAdminSession(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if !agent.ValidID(id) {
		writeError(w, invalidSessionID())
		return
	}
	st, _ := n.view(r.Context(), id, session.HistoryQuery{Limit: 1})
	lease, owner := n.owner(r.Context(), id)
	out := SessionLookup{
		Session: id, Owner: owner, Epoch: strconv.FormatInt(st.Epoch, 10), Seq: strconv.FormatInt(st.Seq, 10),
		Running: st.Running, Pending: len(st.Pending), Viewers: n.census.CountsByNode("session:" + id),
	}
	if owner != "" {
		out.OwnerNode, _, _ = strings.Cut(owner, "/")
		out.LeaseEpoch, out.LeaseLeftMS = strconv.FormatInt(lease.Epoch, 10), lease.Remaining.Milliseconds()
	}
	for _, k := range out.Viewers {
		out.ViewersTotal += k
	}
	writeJSON(w, http.StatusOK, out)
}

// musterDumpJSON is the JSON form of a Muster dump in the admin API:
// incarnations as decimal strings, view hashes as formatViewHash, so a
// JavaScript reader keeps them exact.
func musterDumpJSON(d muster.Dump) map[string]any {
	members := make([]map[string]string, len(d.Members))
	for i, m := range d.Members {
		members[i] = map[string]string{"name": m.Name, "inc": strconv.FormatUint(m.Inc, 10)}
	}
	peers := make(map[string]string, len(d.Peers))
	for p, inc := range d.Peers {
		peers[p] = strconv.FormatUint(inc, 10)
	}
	views := make(map[string]map[string]any, len(d.PeerViews))
	for p, v := range d.PeerViews {
		views[p] = map[string]any{"inc": strconv.FormatUint(v.Inc, 10), "hash": formatViewHash(v.Hash),
			"seq": v.Seq.String(), "in_transition": v.Transition}
	}
	out := map[string]any{
		"scope": d.Scope, "node": d.Node, "incarnation": strconv.FormatUint(d.Incarnation, 10), "status": d.Status.String(),
		"view_hash": formatViewHash(d.ViewHash), "members": members, "peers": peers, "peer_views": views,
		"owed_snapshots": d.Owed, "group_states": d.GroupStates, "occupancy": d.Occupancy, "tombstones": d.Tombstones,
	}
	if d.Pending != nil {
		out["pending_round"] = d.Pending
	}
	if d.Partial {
		out["partial"] = true
	}
	return out
}
