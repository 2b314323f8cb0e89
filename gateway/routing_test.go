package gateway

import (
	"strings"
	"testing"

	"github.com/relaygw/relay/pubsub"
)

// TestRoutingModesObserveFromAnyNode runs the cross-node observation test
// (live events from an owner on another node, a late joiner's replay then
// live with no gap and no duplicate) under each PUBSUB_ROUTING.
func TestRoutingModesObserveFromAnyNode(t *testing.T) {
	for _, routing := range pubsub.Routings {
		t.Run(string(routing), func(t *testing.T) {
			c := newTestCluster(t)
			for _, name := range []string{"a", "b", "cc"} {
				c.addWith(name, nil, func(cfg *Config) { cfg.PubSubRouting = string(routing) })
			}
			for _, n := range c.nodes {
				if got := n.pubsub.Routing(); got != routing {
					t.Fatalf("%s routes by %s, want %s", n.Name(), got, routing)
				}
			}
			observeFromAnyNode(t, c)
			var sent, received int64
			for _, n := range c.nodes {
				sent += n.pubsub.Counts().Sent
				received += n.pubsub.Counts().Received
			}
			if sent == 0 || received == 0 {
				t.Fatalf("%s: %d messages sent, %d received between nodes; the events crossed nodes by another path", routing, sent, received)
			}
		})
	}
}

func TestConfigPubSubRouting(t *testing.T) {
	cluster := func(r string) Config {
		c := DefaultConfig()
		c.DatabaseURL, c.RedisURL, c.NATSURL = "postgres://x", "redis://x", "nats://x"
		c.PubSubRouting = r
		return c
	}
	for _, r := range []string{"muster", "subjects", "flood"} {
		if err := cluster(r).Validate(); err != nil {
			t.Fatalf("PUBSUB_ROUTING=%s: %v", r, err)
		}
	}
	for _, r := range []string{"", "Muster", "nats", "subjects,flood"} {
		err := cluster(r).Validate()
		if r == "" {
			continue // "" is the default, muster (kong fills the default from the tag)
		}
		if err == nil || !strings.Contains(err.Error(), "PUBSUB_ROUTING") || !strings.Contains(err.Error(), "muster, subjects or flood") {
			t.Fatalf("PUBSUB_ROUTING=%q: %v, want an error naming the setting and its values", r, err)
		}
	}
	single := DefaultConfig()
	single.PubSubRouting = "subjects"
	if err := single.Validate(); err == nil || !strings.Contains(err.Error(), "NATS_URL") {
		t.Fatalf("subjects routing without NATS_URL: %v, want an error naming NATS_URL", err)
	}
}
