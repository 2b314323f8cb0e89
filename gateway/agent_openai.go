package gateway

import (
	"errors"
	"fmt"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/agent/openai"
)

// newOpenAIAgent builds the AGENT=openai backend (package agent/openai)
// from OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL, OPENAI_IDLE_TIMEOUT and
// AGENT_SYSTEM_PROMPT. Without OPENAI_BASE_URL or OPENAI_MODEL, or with a
// base URL that is not an absolute http(s) URL, it refuses with a message
// naming the setting.
func newOpenAIAgent(c Config) (agent.Agent, error) {
	var missing []string
	if c.OpenAIBaseURL == "" {
		missing = append(missing, "OPENAI_BASE_URL (the API root, /v1 included, e.g. http://127.0.0.1:8000/v1)")
	}
	if c.OpenAIModel == "" {
		missing = append(missing, "OPENAI_MODEL (the model the server serves)")
	}
	switch len(missing) {
	case 1:
		return nil, fmt.Errorf("gateway: AGENT=openai needs %s", missing[0])
	case 2:
		return nil, fmt.Errorf("gateway: AGENT=openai needs %s and %s", missing[0], missing[1])
	}
	if c.OpenAIIdleTimeout < 0 {
		return nil, errors.New("gateway: OPENAI_IDLE_TIMEOUT must not be negative")
	}
	ag, err := openai.New(openai.Config{
		BaseURL:      c.OpenAIBaseURL,
		APIKey:       c.OpenAIAPIKey,
		Model:        c.OpenAIModel,
		SystemPrompt: c.SystemPrompt,
		IdleTimeout:  c.OpenAIIdleTimeout,
	})
	if err != nil {
		// Model is set, so the base URL is what openai.New refused.
		return nil, fmt.Errorf("gateway: AGENT=openai: OPENAI_BASE_URL: %w", err)
	}
	return ag, nil
}
