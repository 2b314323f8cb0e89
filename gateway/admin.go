package gateway

import (
	"context"
	"net/http"
	"strconv"
)

// NodeInfo is the GET /admin/node response.
type NodeInfo struct {
	Name     string `json:"name"`
	Owner    string `json:"owner"`
	Mode     string `json:"mode"`
	Ready    bool   `json:"ready"`
	Draining bool   `json:"draining"`
	Sockets  int64  `json:"sockets"`
	Sessions int    `json:"sessions"`
	// Cluster is the node's Muster view: status ("ready", "rebalancing",
	// ...), view hash (hex) and member node names, sorted. Nodes agree on
	// routing once each is ready with the same view hash.
	Cluster *ClusterInfo `json:"cluster,omitempty"`
}

// ClusterInfo is the Muster part of NodeInfo.
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
		Name: n.name, Owner: n.Owner(), Mode: n.mode,
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
		ViewHash: strconv.FormatUint(n.scope.ViewHash(), 16),
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
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.DrainWindow)
		defer cancel()
		_ = n.Drain(ctx)
	}()
	writeJSON(w, http.StatusAccepted, map[string]any{"node": n.name, "draining": true})
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
	writeJSON(w, http.StatusOK, map[string]any{"node": n.name, "pubsub": n.pubsub.Counts(), "muster": d})
}
