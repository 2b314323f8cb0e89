package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/trace"
)

// A node drained from the admin API refuses events, reports "drained",
// and after POST /admin/undrain accepts events and runs their turns again;
// an undrain of a node that is not draining changes nothing.
func TestUndrainAfterDrain(t *testing.T) {
	n, srv, tr := testNode(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // hang guard
	defer cancel()
	admin := func(method, path string) (int, map[string]any) {
		status, _, body := do(t, method, srv.URL+path, testAdmin, "", "")
		return status, body
	}
	if status, body := admin("POST", "/admin/undrain"); status != http.StatusOK || body["status"] == "draining" || body["status"] == "drained" {
		t.Fatalf("undrain of a running node: %d %v", status, body)
	}
	post(t, srv, "u1", "before")

	if status, _ := admin("POST", "/admin/drain"); status != http.StatusAccepted {
		t.Fatalf("drain: %d", status)
	}
	if _, err := tr.WaitFor(ctx, trace.Kind("gateway.drained", "node", n.name)); err != nil {
		t.Fatal(err, tr.Dump())
	}
	if st := n.Status(); st.Status != "drained" {
		t.Fatalf("status after the drain: %+v", st)
	}
	status, _, body := do(t, "POST", srv.URL+"/api/sessions/u1/events", testAPIKey, "", `{"data":{"text":"during"}}`)
	if status != http.StatusServiceUnavailable || body["error"] != CodeDraining {
		t.Fatalf("event while drained: %d %v", status, body)
	}

	if status, body := admin("POST", "/admin/undrain"); status != http.StatusOK || body["name"] != n.name {
		t.Fatalf("undrain: %d %v", status, body)
	}
	if n.Draining() {
		t.Fatal("still draining after the undrain")
	}
	post(t, srv, "u1", "after")
	if _, err := tr.WaitFor(ctx, trace.Kind("session.emit", "session", "u1", "type", "turn_completed")); err != nil {
		t.Fatal(err, tr.Dump())
	}
	// The endpoint takes sockets again: a refused upgrade would answer 503.
	tok, _ := n.Auth().Mint("u", []string{"*"}, time.Hour)
	resp, err := http.Get(srv.URL + "/socket/websocket?vsn=2.0.0&token=" + tok)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		t.Fatal("the endpoint still refuses sockets after the undrain")
	}
}

// Two cluster nodes: each lists both in GET /admin/cluster with the other's
// exact incarnation (a decimal string) and owner; a drain of b requested on
// a reaches b over NATS, b's undrain through a brings it back into one
// ready Muster view; an unknown node is 404 node_not_found.
func TestClusterStatusAndRemoteDrain(t *testing.T) {
	c := newTestCluster(t, "a", "b")
	c.waitReady()
	a, b := c.nodes[0], c.nodes[1]
	srvA := c.srvs[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // hang guard
	defer cancel()
	if _, err := c.tr.WaitFor(ctx, trace.Kind("ops.status", "node", "a", "from", "b")); err != nil {
		t.Fatal(err)
	}
	status, _, body := do(t, "GET", srvA.URL+"/admin/cluster", testAdmin, "", "")
	if status != http.StatusOK {
		t.Fatalf("GET /admin/cluster: %d %v", status, body)
	}
	raw, _ := json.Marshal(body)
	var view ClusterView
	if err := json.Unmarshal(raw, &view); err != nil {
		t.Fatal(err)
	}
	if len(view.Nodes) != 2 || view.Nodes[0].Name != "a" || view.Nodes[1].Name != "b" {
		t.Fatalf("nodes: %+v", view.Nodes)
	}
	nb := view.Nodes[1]
	if nb.Incarnation != strconv.FormatUint(b.incarnationNum, 10) || nb.Owner != b.Owner() || nb.Muster == nil || len(nb.Muster.ViewHash) != 16 {
		t.Fatalf("b as a sees it: %+v (want incarnation %d, owner %s)", nb, b.incarnationNum, b.Owner())
	}

	if status, _, body := do(t, "POST", srvA.URL+"/admin/nodes/nobody/drain", testAdmin, "", ""); status != http.StatusNotFound || body["error"] != CodeNodeNotFound {
		t.Fatalf("drain of an unknown node: %d %v", status, body)
	}
	if status, _, body := do(t, "POST", srvA.URL+"/admin/nodes/b/drain", testAdmin, "", ""); status != http.StatusOK || body["name"] != "b" {
		t.Fatalf("drain of b through a: %d %v", status, body)
	}
	if _, err := c.tr.WaitFor(ctx, trace.Kind("gateway.drained", "node", "b")); err != nil {
		t.Fatal(err, c.tr.Dump())
	}
	if _, err := c.tr.WaitFor(ctx, trace.Kind("ops.status", "node", "a", "from", "b", "status", "drained")); err != nil {
		t.Fatal(err)
	}
	if status, _, body := do(t, "POST", srvA.URL+"/admin/nodes/b/undrain", testAdmin, "", ""); status != http.StatusOK || body["name"] != "b" {
		t.Fatalf("undrain of b through a: %d %v", status, body)
	}
	if b.Draining() {
		t.Fatal("b still draining")
	}
	waitReadyAmong(t, []*Node{a, b})
}

// What accept keeps is a status that marshals again and shows in the
// cluster view under its name; anything else is refused and changes
// nothing.
func FuzzOpsStatusAccept(f *testing.F) {
	good, _ := json.Marshal(NodeStatus{Name: "p", Owner: "p/x", Incarnation: "1796116541493435493", Status: "ready",
		Muster: &MusterStatus{Status: "ready", Ready: true, ViewHash: "00000000deadbeef", Members: []string{"p"}}})
	f.Add(good)
	f.Add([]byte(`{"name":"n1"}`))
	f.Add([]byte(`{"name":""}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"name":"q","sockets":1e400}`))
	n := &Node{name: "self"}
	f.Fuzz(func(t *testing.T, b []byte) {
		o := &opsStatus{n: n, every: time.Hour, peers: map[string]peerStatus{}}
		now := time.Now()
		kept := o.accept(b, now)
		nodes := o.view(NodeStatus{Name: n.name}, now)
		if !kept {
			if len(nodes) != 1 || nodes[0].Name != n.name {
				t.Fatalf("a refused message changed the view: %+v", nodes)
			}
			return
		}
		if len(nodes) != 2 {
			t.Fatalf("a kept message is not in the view: %+v", nodes)
		}
		for _, st := range nodes {
			out, err := json.Marshal(st)
			if err != nil {
				t.Fatalf("kept status does not marshal: %v", err)
			}
			var back NodeStatus
			if err := json.Unmarshal(out, &back); err != nil || back.Name != st.Name {
				t.Fatalf("kept status does not round-trip: %v %q", err, out)
			}
		}
	})
}

// A missing asset answers the API's JSON 404; a present one is served.
func TestMissingAssetIsJSON404(t *testing.T) {
	_, srv, _ := testNode(t, nil)
	for _, p := range []string{"/assets/nope.js", "/assets/", "/static/nope.css", "/assets/../static/index.html"} {
		status, hdr, body := do(t, "GET", srv.URL+p, "", "", "")
		if status != http.StatusNotFound || body["error"] != CodeNotFound || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
			t.Fatalf("GET %s: %d %v %v", p, status, hdr, body)
		}
	}
	resp, err := http.Get(srv.URL + "/static/style.css")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /static/style.css: %d", resp.StatusCode)
	}
}
