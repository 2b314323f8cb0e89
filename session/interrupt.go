package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"
)

// Interrupts (docs/OWNERSHIP.md "Interrupts"): an agent ends a turn by
// asking the people watching (approve a tool call, pick an option). The
// interrupt is written to the history with the turn's end, so it is as
// durable as a completed turn and survives any takeover; it is published
// as the turn's last event and stays in the replay log. A client answers
// it with a "resume" input, routed like any event; the first answer the
// owner accepts wins and its turn (the continuation) gets the answer in
// Turn.Answer.

// Event and input types of interrupts.
const (
	// TypeInterrupt is emitted by an agent (data: Interrupt without turn)
	// to end its turn with a question, and published by the actor as the
	// turn's last event with Interrupt's whole wire shape.
	TypeInterrupt = "interrupt"
	// TypeInterruptExpired is published when an open interrupt's
	// expires_at passes without an answer: {"interrupt":id,"turn":{…}}.
	TypeInterruptExpired = "interrupt_expired"
	// TypeResume is the input type of an answer:
	// {"type":"resume","data":{"interrupt":id,"value":…}}.
	TypeResume = "resume"
	// RoleInterrupt is the history role of an interrupt: the message's
	// content is the Interrupt as JSON.
	RoleInterrupt = "interrupt"
)

// Interrupt is a question an agent ended its turn with. Wire shape (the
// interrupt event's data, and a RoleInterrupt history message's content):
//
//	{"id":"…","kind":"…","payload":{…},"expires_at":RFC3339,"turn":{"epoch","seq"}}
//
// ID is 1 to 128 characters of [A-Za-z0-9_.:-]; Kind 1 to 64 characters
// (e.g. "approval"); Payload is any JSON the agent chose (absent: null);
// ExpiresAt is optional; Turn is the position of the input of the turn that
// asked (set by the actor).
type Interrupt struct {
	ID        string          `json:"id"`
	Kind      string          `json:"kind"`
	Payload   json.RawMessage `json:"payload,omitempty"`
	ExpiresAt *time.Time      `json:"expires_at,omitempty"`
	Turn      Position        `json:"turn"`
}

// InterruptAnswer is what a continuation turn gets (Turn.Answer): the
// interrupt it answers and the client's value (any JSON).
type InterruptAnswer struct {
	Interrupt Interrupt
	Value     json.RawMessage
}

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
func parseInterrupt(data json.RawMessage) (Interrupt, error) {
	var iv Interrupt
	if err := json.Unmarshal(data, &iv); err != nil {
		return Interrupt{}, fmt.Errorf("session: emit interrupt: %w", err)
	}
	if !ValidID(iv.ID) {
		return Interrupt{}, errors.New("session: emit interrupt: id must be 1-128 characters of [A-Za-z0-9_.:-]")
	}
	if iv.Kind == "" || len(iv.Kind) > 64 {
		return Interrupt{}, errors.New("session: emit interrupt: kind must be 1-64 characters")
	}
	return iv, nil
}

// waitState is the session's newest interrupt as the owner knows it.
type waitState struct {
	iv       Interrupt
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
func (a *actor) checkAnswer(in Input) error {
	var d resumeData
	if err := json.Unmarshal(in.Data, &d); err != nil || d.Interrupt == "" {
		return refuse(RuleResume, `a resume input's data must be {"interrupt":"<id>","value":…}`)
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
func (a *actor) noteAccepted(in Input) {
	if in.Type != TypeResume || a.wait == nil || a.wait.answered {
		return
	}
	a.stopExpiry()
	a.wait.answered = true
}

// raise makes iv the session's open interrupt (its turn's end is written)
// and arms its expiry.
func (a *actor) raise(iv Interrupt) {
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
	if _, err := a.emit(TypeInterruptExpired, data); err != nil {
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
		return typ == TypeResume && json.Unmarshal(data, &d) == nil && d.Interrupt == id
	}
	for i := len(history) - 1; i >= 0; i-- {
		if history[i].Role != RoleInterrupt {
			continue
		}
		var iv Interrupt
		if json.Unmarshal([]byte(history[i].Content), &iv) != nil {
			return
		}
		// An earlier owner that published its expiry leaves it in the log's
		// tail (readTail); the expiry is not published again.
		w := &waitState{iv: iv, expired: slices.Contains(a.tailExpired, iv.ID)}
		a.m.tr.Emit("session.interrupt.thawed", "owner", a.m.cfg.Owner, "session", a.id, "interrupt", iv.ID, "expired", w.expired)
		for _, m := range history[i+1:] {
			// A completed turn's user message holds its input's data.
			if m.Role == "user" && answers(TypeResume, []byte(m.Content), iv.ID) {
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
func (a *actor) answerFor(p pendingInput) *InterruptAnswer {
	if p.Input.Type != TypeResume || a.wait == nil {
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
	return &InterruptAnswer{Interrupt: a.wait.iv, Value: v}
}
