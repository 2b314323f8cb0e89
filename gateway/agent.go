package gateway

import (
	"fmt"
	neturl "net/url"
	"strings"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/agent/httpagent"
	"github.com/relaygw/relay/session"
	"go.uber.org/zap"
)

// buildAgent returns the agent the AGENT and AGENT_ROUTES settings select:
// the AGENT backend, behind a router when AGENT_ROUTES maps session-id
// prefixes to other backends. Errors name the setting to fix.
func (c Config) buildAgent(log *zap.Logger) (agent.Agent, error) {
	def, err := c.agentBackend(c.Agent, "AGENT", log)
	if err != nil {
		return nil, err
	}
	if len(c.AgentRoutes) == 0 {
		return def, nil
	}
	var routes []agent.Route
	seen := make(map[string]bool)
	for _, pair := range c.AgentRoutes {
		prefix, backend, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || prefix == "" || backend == "" {
			return nil, fmt.Errorf("gateway: AGENT_ROUTES entry %q is not prefix=backend", pair)
		}
		if seen[prefix] {
			return nil, fmt.Errorf("gateway: AGENT_ROUTES names the prefix %q twice", prefix)
		}
		seen[prefix] = true
		ag, err := c.agentBackend(backend, "AGENT_ROUTES "+prefix, log)
		if err != nil {
			return nil, err
		}
		routes = append(routes, agent.Route{Prefix: prefix, Agent: ag})
	}
	return agent.NewRouter(def, routes), nil
}

// agentBackend builds one backend by name (setting names where it was
// given, for errors; log for the backend's own logs). A name that is an
// http(s) URL is the http backend at that URL. Adding a backend is one more
// case here.
func (c Config) agentBackend(name, setting string, log *zap.Logger) (agent.Agent, error) {
	url := c.AgentURL
	if strings.HasPrefix(name, "http://") || strings.HasPrefix(name, "https://") {
		name, url = "http", name
	}
	switch name {
	case "echo":
		return session.EchoAgent{Delay: c.EchoDelay}, nil
	case "http":
		if url == "" {
			return nil, fmt.Errorf("gateway: %s=http needs AGENT_URL (the agent's endpoint, docs/AGENT_PROTOCOL.md)", setting)
		}
		ag, err := httpagent.New(httpagent.Config{
			URL: url, Secret: c.AgentSecret,
			TurnTimeout: c.AgentTurnTimeout, RetryBudget: c.AgentRetryBudget,
			MaxEventBytes: c.AgentMaxEventBytes, MaxReplyBytes: c.AgentMaxReplyBytes,
			Logger: log.With(zap.String("agent", redactURL(url))),
		})
		if err != nil {
			return nil, fmt.Errorf("gateway: %s=http: %w", setting, err)
		}
		return ag, nil
	case "openai":
		return newOpenAIAgent(c)
	}
	return nil, fmt.Errorf("gateway: %s=%q is not an agent backend; use echo, http or openai", setting, name)
}

// redactURL returns raw with any password replaced (for logs).
func redactURL(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// redactRoutes returns AGENT_ROUTES entries with any URL password replaced
// (for logs).
func redactRoutes(routes []string) []string {
	out := make([]string, len(routes))
	for i, r := range routes {
		prefix, backend, _ := strings.Cut(r, "=")
		if strings.Contains(backend, "://") {
			backend = redactURL(backend)
		}
		out[i] = prefix + "=" + backend
	}
	return out
}
