package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/relaygw/relay/agent"
)

// Turn control (docs/OWNERSHIP.md "Turn control"): a client stops a
// running turn, or says what an input does while a turn runs (double
// texting). A control is routed to the session's owner like an input
// (Manager.Control: claim, forward, re-resolve, retry directive), and the
// owner checks it against its own state under its current epoch.

// Control operations.
const (
	OpStop = "stop" // stop the running turn whose input is at Control.Turn
)

// Control is a control message for a session's owner. Wire shape (inside a
// ForwardRequest): {"op":"stop","turn":{"epoch":E,"seq":S}}.
type Control struct {
	Op   string         `json:"op"`
	Turn agent.Position `json:"turn"`
}

// Reasons a control changed nothing (ControlResult.Reason).
const (
	// ReasonNotRunning: the turn named is not the running one (it finished,
	// was never accepted, or waits behind another turn). Nothing changed.
	ReasonNotRunning = "not_running"
)

// ControlResult is the owner's answer to a control. Stopped is true when
// the turn was running and has been stopped: its turn_stopped event is
// published and its partial reply written to the history. Otherwise
// Reason says why nothing changed, and Running names the turn running now
// (nil when none runs).
//
//	{"stopped":bool,"turn":{"epoch","seq"},"reason":"not_running","running":{"epoch","seq"}}
type ControlResult struct {
	Stopped bool            `json:"stopped"`
	Turn    agent.Position  `json:"turn"`
	Reason  string          `json:"reason,omitempty"`
	Running *agent.Position `json:"running,omitempty"`
}

// Double-texting modes: what an input does when it arrives while a turn
// runs (Input.Multitask, Config.DoubleTexting).
const (
	// MultitaskEnqueue queues the input behind the running turn.
	MultitaskEnqueue = "enqueue"
	// MultitaskReject refuses the input (ErrTurnBusy, naming the running
	// turn); nothing is accepted.
	MultitaskReject = "reject"
	// MultitaskInterrupt accepts the input and stops the running turn as a
	// stop would (turn_stopped, the partial reply in the history); the
	// input then runs with that history.
	MultitaskInterrupt = "interrupt"
)

// ValidMultitask reports whether s is a double-texting mode ("" means the
// configured default).
func ValidMultitask(s string) bool {
	switch s {
	case "", MultitaskEnqueue, MultitaskReject, MultitaskInterrupt:
		return true
	}
	return false
}

// ErrTurnBusy is matched by *TurnBusyError (errors.Is).
var ErrTurnBusy = errors.New("session: a turn is running and the input asked to be rejected")

// TurnBusyError refuses an input whose double-texting mode is reject while
// a turn runs. Turn is the running turn's input position. Nothing was
// accepted.
type TurnBusyError struct {
	Turn agent.Position
}

func (e *TurnBusyError) Error() string {
	return fmt.Sprintf("session: turn %v is running; the input asked to be rejected", e.Turn)
}

// Is makes errors.Is(err, ErrTurnBusy) true.
func (e *TurnBusyError) Is(target error) bool { return target == ErrTurnBusy }

// ParseTurnID parses a turn id "<epoch>-<seq>" (as Position.String writes
// it): two decimal integers, epoch >= 1 and seq >= 1, at most 18 digits
// each, nothing else. ok is false otherwise.
func ParseTurnID(s string) (agent.Position, bool) {
	e, q, found := strings.Cut(s, "-")
	if !found || !decimal(e) || !decimal(q) {
		return agent.Position{}, false
	}
	epoch, err1 := strconv.ParseInt(e, 10, 64)
	seq, err2 := strconv.ParseInt(q, 10, 64)
	if err1 != nil || err2 != nil || epoch < 1 || seq < 1 {
		return agent.Position{}, false
	}
	return agent.Position{Epoch: epoch, Seq: seq}, true
}

func decimal(s string) bool {
	if s == "" || len(s) > 18 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// stoppedData is the data of turn_stopped.
type stoppedData struct {
	Turn    agent.Position `json:"turn"`
	Partial string         `json:"partial"`
}

// ControlLocal is the local half of Control, as Accept is of Submit: it
// claims the lease for session id, then hands c to the session's actor
// (thawing it if needed: a turn an earlier owner left running is resumed
// first, so a stop re-sent after a takeover stops it here) and waits for
// its answer. Errors are Accept's (a *LeaseHeldError when another process
// holds the lease; ErrFenced when this node lost the session mid-request;
// ErrStoreUnavailable), plus ErrInvalidControl for an unknown op.
func (m *Manager) ControlLocal(ctx context.Context, id string, c Control) (ControlResult, error) {
	if !agent.ValidID(id) {
		return ControlResult{}, ErrInvalidID
	}
	if c.Op != OpStop {
		return ControlResult{}, fmt.Errorf("session: control %q: op %q: %w", id, c.Op, ErrInvalidControl)
	}
	acc, err := m.claimAndSubmit(ctx, id, &submitReq{ctl: &c})
	if err != nil {
		return ControlResult{}, err
	}
	return *acc.Control, nil
}

// ErrInvalidControl means a control's op is not one this node knows.
var ErrInvalidControl = errors.New("session: unknown control op")

// Control routes c to session id's owner and answers one Outcome, exactly
// as Submit routes an input (docs/OWNERSHIP.md "Event (write)"): run here
// when this process holds or takes the lease, forwarded to the holder's
// node otherwise, re-resolved when that node is unreachable, refused with a
// retry directive when ownership is moving. An accepted Outcome's Control
// is the owner's answer. A control that reaches a node no longer owning
// the session is never applied there: its claim names the new holder (the
// control is forwarded there) or its write is fenced (refused with a retry
// directive).
//
// A stop of a session the store has never seen (no actor here, no stored
// row: no input was ever accepted, so no turn can run) is answered
// not_running at once, without claiming its lease: a stop creates no
// session.
func (m *Manager) Control(ctx context.Context, id string, c Control) Outcome {
	if c.Op == OpStop && m.neverSeen(ctx, id) {
		m.tr.Emit("session.control.unknown", "owner", m.cfg.Owner, "session", id, "turn", c.Turn.String())
		return Outcome{Kind: OutcomeAccepted, Accepted: Accepted{Session: id, Control: &ControlResult{Turn: c.Turn, Reason: ReasonNotRunning}}}
	}
	return m.route(ctx, id, agent.Input{}, &c)
}

// neverSeen reports whether session id has no actor on this node and no
// row in the session store (one read within ReadTimeout). An invalid id, or
// a store that cannot be read, is not "never seen": the caller routes as
// usual and gets the usual answer.
func (m *Manager) neverSeen(ctx context.Context, id string) bool {
	if !agent.ValidID(id) {
		return false
	}
	m.mu.Lock()
	_, live := m.actors[id]
	m.mu.Unlock()
	if live {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.ReadTimeout)
	defer cancel()
	_, ok, err := m.cfg.Store.Read(ctx, id, HistoryQuery{})
	return err == nil && !ok
}

// control applies a control in the actor goroutine.
func (a *actor) control(req *submitReq) {
	c := req.ctl
	answer := func(r ControlResult) {
		req.reply <- submitReply{acc: Accepted{Session: a.id, Control: &r}}
	}
	t := a.turn
	if t == nil || t.input.pos() != c.Turn || t.ctx.Err() != nil && !t.stopped {
		r := ControlResult{Turn: c.Turn, Reason: ReasonNotRunning}
		if t != nil {
			p := t.input.pos()
			r.Running = &p
		}
		a.m.tr.Emit("session.control.noop", "owner", a.m.cfg.Owner, "session", a.id, "op", c.Op, "turn", c.Turn.String())
		answer(r)
		return
	}
	t.waiters = append(t.waiters, req.reply)
	a.stopTurn("client")
}

// stopTurn stops the running turn: its context is cancelled with
// ErrTurnStopped, and when the agent returns, finishTurn ends it as
// stopped. Idempotent.
func (a *actor) stopTurn(by string) {
	t := a.turn
	if t == nil || t.stopped {
		return
	}
	t.stopped = true
	a.m.tr.Emit("session.turn.stop", "owner", a.m.cfg.Owner, "session", a.id, "input_epoch", t.input.Epoch,
		"input_seq", t.input.Seq, "by", by)
	t.stop(agent.ErrTurnStopped)
}

// partialOf adds a delta's data.text to the running turn's partial reply.
func (t *turnRun) addPartial(typ string, data json.RawMessage) {
	if typ != agent.TypeDelta {
		return
	}
	var d deltaData
	if json.Unmarshal(data, &d) == nil {
		t.partial.WriteString(d.Text)
	}
}

// answerStops answers the stops waiting for t: stopped at ev, or err.
func (t *turnRun) answerStops(stopped bool, err error) {
	for _, w := range t.waiters {
		r := ControlResult{Turn: t.input.pos(), Stopped: stopped}
		if !stopped {
			r.Reason = ReasonNotRunning
		}
		if err != nil {
			w <- submitReply{err: err}
			continue
		}
		w <- submitReply{acc: Accepted{Session: "", Control: &r}}
	}
	t.waiters = nil
}
