package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/relaygw/relay/agent"
)

// resumeData is the data of a TypeResume input.
type resumeData struct {
	Interrupt string          `json:"interrupt"`
	Value     json.RawMessage `json:"value"`
}

// Errors of an answer. Nothing was accepted.
var (
	// ErrInterruptAnswered: the interrupt was answered already (the first
	// answer wins).
	ErrInterruptAnswered = errors.New("session: the interrupt was answered already")
	// ErrInterruptExpired: the interrupt's expires_at has passed.
	ErrInterruptExpired = errors.New("session: the interrupt has expired")
	// ErrInterruptNotFound: the session has no open interrupt of that id
	// (never raised, or superseded by a later event).
	ErrInterruptNotFound = errors.New("session: no such open interrupt")
)

// parseInterrupt decodes and checks an agent's interrupt emit.
func parseInterrupt(data json.RawMessage) (agent.Interrupt, error) {
	var iv agent.Interrupt
	if err := json.Unmarshal(data, &iv); err != nil {
		return agent.Interrupt{}, fmt.Errorf("session: emit interrupt: %w", err)
	}
	if !agent.ValidID(iv.ID) {
		return agent.Interrupt{}, errors.New("session: emit interrupt: id must be 1-128 characters of [A-Za-z0-9_.:-]")
	}
	if iv.Kind == "" || len(iv.Kind) > 64 {
		return agent.Interrupt{}, errors.New("session: emit interrupt: kind must be 1-64 characters")
	}
	return iv, nil
}

// waitState is the session's newest interrupt as the owner knows it.
type waitState struct {
	iv       agent.Interrupt
	answered bool // a resume input for it was accepted
	timer    Timer
	expired  bool // interrupt_expired was published by this actor
}

// open reports whether w can still be answered at now.
func (w *waitState) open(now time.Time) bool {
	return w != nil && !w.answered && (w.iv.ExpiresAt == nil || now.Before(*w.iv.ExpiresAt))
}

// checkAnswer decides an answer input (accept, in the actor goroutine):
// nil when it answers the open interrupt, else the refusal. On nil the
// caller marks the interrupt answered once the input is accepted.
func (a *actor) checkAnswer(in agent.Input) error {
	var d resumeData
	if err := json.Unmarshal(in.Data, &d); err != nil || d.Interrupt == "" {
		return refuse(agent.RuleResume, `a resume input's data must be {"interrupt":"<id>","value":…}`)
	}
	w := a.wait
	switch {
	case w == nil || w.iv.ID != d.Interrupt:
		return fmt.Errorf("session: answer %q: %w", d.Interrupt, ErrInterruptNotFound)
	case w.answered:
		return fmt.Errorf("session: answer %q: %w", d.Interrupt, ErrInterruptAnswered)
	case !w.open(a.m.clock.Now()):
		return fmt.Errorf("session: answer %q: %w", d.Interrupt, ErrInterruptExpired)
	}
	return nil
}

// noteAccepted marks the open interrupt answered when in, just accepted,
// is its answer (checkAnswer passed). Other inputs leave it open: the
// conversation may go on while a question waits.
func (a *actor) noteAccepted(in agent.Input) {
	if in.Type != agent.TypeResume || a.wait == nil || a.wait.answered {
		return
	}
	a.stopExpiry()
	a.wait.answered = true
}

// raise makes iv the session's open interrupt (its turn's end is written)
// and arms its expiry.
func (a *actor) raise(iv agent.Interrupt) {
	a.stopExpiry()
	a.wait = &waitState{iv: iv}
	a.armExpiry()
}

// armExpiry arms the open interrupt's expiry timer on the Manager's clock.
func (a *actor) armExpiry() {
	w := a.wait
	if w == nil || w.iv.ExpiresAt == nil || w.answered || w.expired {
		return
	}
	w.timer = a.m.clock.NewTimer(max(w.iv.ExpiresAt.Sub(a.m.clock.Now()), 0))
}

func (a *actor) stopExpiry() {
	if a.wait != nil && a.wait.timer != nil {
		a.wait.timer.Stop()
		a.wait.timer = nil
	}
}

// expiryC is the open interrupt's expiry channel (nil when none).
func (a *actor) expiryC() <-chan time.Time {
	if a.wait == nil || a.wait.timer == nil {
		return nil
	}
	return a.wait.timer.C()
}

// expire publishes interrupt_expired for the open interrupt.
func (a *actor) expire() {
	w := a.wait
	w.timer = nil
	if w.answered || w.expired {
		return
	}
	w.expired = true
	data, _ := json.Marshal(map[string]any{"interrupt": w.iv.ID, "turn": w.iv.Turn})
	a.m.tr.Emit("session.interrupt.expired", "owner", a.m.cfg.Owner, "session", a.id, "interrupt", w.iv.ID)
	if _, err := a.emit(agent.TypeInterruptExpired, data); err != nil {
		a.m.log.Info("interrupt_expired not emitted", zap.String("session", a.id), zap.Error(err))
	}
}

// thawWait rebuilds the wait state from a thaw: the newest interrupt in
// the history window is the session's; it was answered when a later
// history message is the user message of its answer (a completed
// continuation) or an inbox entry is its answer. An interrupt older than
// the history window is forgotten (its answers find no interrupt).
func (a *actor) thawWait(history []StoredMessage, inbox []InboxEntry) {
	answers := func(typ string, data []byte, id string) bool {
		var d resumeData
		return typ == agent.TypeResume && json.Unmarshal(data, &d) == nil && d.Interrupt == id
	}
	for i := len(history) - 1; i >= 0; i-- {
		if history[i].Role != agent.RoleInterrupt {
			continue
		}
		var iv agent.Interrupt
		if json.Unmarshal([]byte(history[i].Content), &iv) != nil {
			return
		}
		// An earlier owner that published its expiry leaves it in the log's
		// tail (readTail); the expiry is not published again.
		w := &waitState{iv: iv, expired: slices.Contains(a.tailExpired, iv.ID)}
		a.m.tr.Emit("session.interrupt.thawed", "owner", a.m.cfg.Owner, "session", a.id, "interrupt", iv.ID, "expired", w.expired)
		for _, m := range history[i+1:] {
			// A completed turn's user message holds its input's data.
			if m.Role == "user" && answers(agent.TypeResume, []byte(m.Content), iv.ID) {
				w.answered = true
			}
		}
		for _, e := range inbox {
			if answers(e.Input.Type, e.Input.Data, iv.ID) {
				w.answered = true
			}
		}
		a.wait = w
		a.armExpiry()
		return
	}
}

// answerFor returns the Turn.Answer of the turn of input p: set when p is
// an answer to the session's newest interrupt.
func (a *actor) answerFor(p pendingInput) *agent.InterruptAnswer {
	if p.Input.Type != agent.TypeResume || a.wait == nil {
		return nil
	}
	var d resumeData
	if json.Unmarshal(p.Input.Data, &d) != nil || d.Interrupt != a.wait.iv.ID {
		return nil
	}
	v := d.Value
	if len(v) == 0 {
		v = json.RawMessage("null")
	}
	return &agent.InterruptAnswer{Interrupt: a.wait.iv, Value: v}
}
