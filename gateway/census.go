package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/muster/memnet"
	"github.com/relaygw/relay/muster/natstransport"
	"github.com/relaygw/relay/presence"
)

// scopeCensus is the transport scope of the viewer counts; scopePresence
// that of the replicated presences.
const (
	scopeCensus   = "census"
	scopePresence = "presence"
)

// buildCensus starts the Census that counts viewers (sockets joined on a
// session topic) across the cluster. Each node reports its hub's session
// topics and broadcasts them every CENSUS_INTERVAL on its own transport
// scope: NATS in cluster mode, the in-process transport otherwise. Counts
// are taken only from peers the Census registered itself
// (docs/MUSTER.md "Census: counts").
//
// It also starts the presence Replica (docs/PHOENIX.md §5.4) on a scope of
// its own, with the Census as its failure detector: presences are accepted
// only from the peer incarnations the Census registered, and a departed
// incarnation's presences are dropped when the Census declares it gone.
func (n *Node) buildCensus(ctx context.Context) error {
	scope := func(name string) muster.Transport {
		if n.nc != nil {
			return natstransport.New(n.nc, natstransport.Config{Prefix: n.cfg.Cluster, Scope: name, Node: n.name, Logger: n.log})
		}
		return memnet.New(1).Transport(n.name)
	}
	var c *presence.Census
	maxListed := n.cfg.PresenceMaxListed
	if maxListed == 0 {
		maxListed = -1 // no limit
	}
	rep := presence.NewReplica(presence.ReplicaConfig{
		Transport:       scope(scopePresence),
		Incarnation:     func() uint64 { return c.Incarnation() },
		Peers:           func() map[string]uint64 { return c.Peers() },
		BroadcastPeriod: n.cfg.PresencePeriod,
		MaxListed:       maxListed,
		OnBroadcast: func(topic, event string, payload json.RawMessage) {
			n.hub.Broadcast(topic, event, payload, nil)
		},
		Logger: n.log.Named("presence"),
		Tracer: n.tracer,
	})
	c = presence.NewCensus(presence.CensusConfig{
		Transport:         scope(scopeCensus),
		Incarnation:       n.incarnationNum,
		BroadcastInterval: n.cfg.CensusInterval,
		LocalCounts:       n.localViewers,
		OnPeer: func(peer string, inc uint64, up bool) {
			if up {
				rep.PeerUp(peer, inc)
			} else {
				rep.PeerDown(peer, inc)
			}
		},
		Logger: n.log.Named("census"),
		Tracer: n.tracer,
	})
	if err := c.Start(ctx); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	n.census = c
	n.closers = append(n.closers, c.Stop)
	if err := rep.Start(ctx); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	n.presence = rep
	n.closers = append(n.closers, rep.Stop)
	return nil
}

// localViewers counts the channels joined on this node per session topic.
func (n *Node) localViewers() map[string]int {
	out := make(map[string]int)
	for _, topic := range n.hub.Topics() {
		if !strings.HasPrefix(topic, "session:") {
			continue
		}
		if k := n.hub.Subscribers(topic); k > 0 {
			out[topic] = k
		}
	}
	return out
}

// Viewers is the GET /admin/viewers response: sockets joined per session
// topic, on this node and across the cluster.
type Viewers struct {
	Node string `json:"node"`
	// Local counts this node's sockets per topic, read now.
	Local map[string]int `json:"local"`
	// Cluster adds every registered peer's latest broadcast counts to
	// Local; a peer's part is at most one CENSUS_INTERVAL old.
	Cluster map[string]int `json:"cluster"`
	// Peers lists the nodes whose counts are included, sorted.
	Peers []string `json:"peers"`
}

// Viewers reports the viewer counts. Topics with no viewer are left out.
func (n *Node) Viewers() Viewers {
	peers := make([]string, 0)
	for name := range n.census.Peers() {
		peers = append(peers, name)
	}
	slices.Sort(peers)
	return Viewers{Node: n.name, Local: n.census.LocalCounts(), Cluster: n.census.Counts(), Peers: peers}
}

func (n *Node) handleAdminViewers(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, n.Viewers())
}
