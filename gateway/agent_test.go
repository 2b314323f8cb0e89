package gateway

import (
	"strings"
	"testing"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/agent/httpagent"
	"github.com/relaygw/relay/session"
	"go.uber.org/zap"
)

// AGENT and AGENT_ROUTES select the backend; a setting that cannot work is
// refused by Validate with an error naming it.
func TestAgentSetting(t *testing.T) {
	base := DefaultConfig()
	if ag, err := base.buildAgent(zap.NewNop()); err != nil {
		t.Fatal(err)
	} else if _, ok := ag.(session.EchoAgent); !ok {
		t.Fatalf("default agent %T, want the echo agent", ag)
	}

	c := base
	c.Agent, c.AgentURL, c.AgentSecret = "http", "http://127.0.0.1:9/agent", "s"
	if ag, err := c.buildAgent(zap.NewNop()); err != nil {
		t.Fatal(err)
	} else if _, ok := ag.(*httpagent.Agent); !ok {
		t.Fatalf("AGENT=http built %T", ag)
	}

	c.AgentRoutes = []string{"support-=https://support.example/agent", "demo-=echo", "support-vip-=http"}
	ag, err := c.buildAgent(zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	r, ok := ag.(*agent.Router)
	if !ok {
		t.Fatalf("AGENT_ROUTES built %T, want a router", ag)
	}
	if _, ok := r.For("demo-1").(session.EchoAgent); !ok {
		t.Errorf("demo-1 runs on %T, want echo", r.For("demo-1"))
	}
	if r.For("support-vip-1") == r.For("support-1") || r.For("other") == r.For("demo-1") {
		t.Errorf("routes do not pick the longest prefix")
	}
	if !r.Resumable() {
		t.Errorf("a router over resumable backends does not resume")
	}

	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Agent = "gpt" }, `AGENT="gpt" is not an agent backend`},
		{func(c *Config) { c.Agent = "http" }, "AGENT=http needs AGENT_URL"},
		{func(c *Config) { c.Agent, c.AgentURL = "http", "ftp://x" }, "not an http:// or https:// URL"},
		{func(c *Config) { c.Agent, c.AgentURL = "http", "http://x" }, "AGENT_SECRET is empty"},
		{func(c *Config) { c.AgentRoutes = []string{"nope"} }, `AGENT_ROUTES entry "nope" is not prefix=backend`},
		{func(c *Config) { c.AgentRoutes = []string{"a=echo", "a=echo"} }, `names the prefix "a" twice`},
		{func(c *Config) { c.AgentRoutes = []string{"a=http"} }, "AGENT_ROUTES a=http needs AGENT_URL"},
	} {
		c := DefaultConfig()
		tc.edit(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate = %v, want an error containing %q", err, tc.want)
		}
	}
}
