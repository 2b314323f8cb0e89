package gateway

import (
	"context"
	"net/http"
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
}

// Info describes the node for operators.
func (n *Node) Info() NodeInfo {
	return NodeInfo{
		Name: n.name, Owner: n.Owner(), Mode: n.mode,
		Ready: !n.draining.Load(), Draining: n.draining.Load(),
		Sockets: n.endpoint.Stats().SocketsOpen, Sessions: len(n.manager.Sessions()),
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
