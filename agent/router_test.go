package agent

import (
	"context"
	"testing"
)

// named is a unit-test agent that answers with its name.
type named struct {
	name      string
	resumable bool
}

func (n named) Run(context.Context, Turn, Emit) (Message, error) {
	return Message{Role: "assistant", Content: n.name}, nil
}

func (n named) Resumable() bool { return n.resumable }

// The longest matching prefix picks the agent; other sessions run on the
// default. The router resumes only when every agent it routes to does.
func TestRouter(t *testing.T) {
	r := NewRouter(named{"default", true}, []Route{
		{Prefix: "support-", Agent: named{"support", true}},
		{Prefix: "support-vip-", Agent: named{"vip", true}},
	})
	for id, want := range map[string]string{"support-1": "support", "support-vip-1": "vip", "supp": "default", "demo-1": "default"} {
		msg, err := r.Run(context.Background(), Turn{Session: id}, nil)
		if err != nil || msg.Content != want {
			t.Errorf("session %s ran on %q (%v), want %q", id, msg.Content, err, want)
		}
	}
	if !r.Resumable() {
		t.Error("all agents resume, the router does not")
	}
	if NewRouter(named{"default", true}, []Route{{Prefix: "x", Agent: named{"x", false}}}).Resumable() {
		t.Error("a router with a non-resuming agent resumes")
	}
}
