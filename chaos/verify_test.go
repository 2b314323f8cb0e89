package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/testkit/proctest"
)

// runData is what one checker run collected, once the cluster is quiet.
type runData struct {
	Deliveries []*delivery
	// Histories holds each session's whole history as the pages of GET
	// /api/sessions/{id} answered it.
	Histories map[string][]proctest.HistoryMessage
	// Logs holds each session's whole replay log, read from Redis.
	Logs      map[string][]agent.Event
	Observers []observed
}

// observed is what one observer ended with.
type observed struct {
	Node, Session string
	Record        []phxtest.SessionEvent // the events it holds
	Seen          []phxtest.SessionEvent // every push it read
	// Holes describes each seq jump it kept because its rejoin's reply said
	// recovered:false (the replay could not fill it).
	Holes []string
}

// report is a run's outcome: its counts and the violations of each
// property.
type report struct {
	Seed uint64
	tally
	// Violations describes each violation, by property.
	Violations map[string][]string
}

// tally counts a run's outcomes.
type tally struct {
	// The writers' side.
	Accepted   int // deliveries answered 202 (new or duplicate)
	Duplicates int // of those, answered 202 duplicate:true
	Refused    int // given up after refusals only (nothing may have run)
	Unknown    int // given up after an answer that left the outcome open
	// Refusals and Open count the answers the writers followed: refusals
	// (503 directive, 429) and answers that left the outcome open (no
	// answer, 504, 502, 409, 500).
	Refusals, Open int
	// (a) every accepted event is in history once and its turn ended.
	Lost        int // accepted, not in history
	Duplicated  int // accepted, more than once in history
	LoggedTwice int // accepted, more than one user_event in the replay log
	Unlogged    int // accepted, no user_event in the replay log
	Incomplete  int // in history, but its turn neither completed nor failed
	FailedTurns int // in history, turn ended with turn_failed (allowed)
	// (b) a refusal is atomic.
	// RefusedRan counts events refused only, yet in history or log; and
	// events refused, then answered duplicate, or accepted anew with a
	// user_event already logged by a refused attempt.
	RefusedRan int
	// (c) one writer per (session, epoch).
	SplitBrain int // positions holding two different events; two keys accepted at one position
	// (d) every gap an observer met was closed by a rejoin.
	Gaps int // observer records that are not the replay log
}

func (r *report) violate(property, format string, args ...any) {
	if r.Violations == nil {
		r.Violations = map[string][]string{}
	}
	r.Violations[property] = append(r.Violations[property], fmt.Sprintf(format, args...))
}

func (r report) String() string {
	return fmt.Sprintf("seed %d: accepted %d (%d duplicate answers), refused %d, given up unknown %d, answers followed: %d refusals, %d open | "+
		"lost %d, duplicated %d, logged twice %d, unlogged %d, incomplete %d, failed turns %d | refused but ran %d | split-brain %d | gaps %d",
		r.Seed, r.Accepted, r.Duplicates, r.Refused, r.Unknown, r.Refusals, r.Open,
		r.Lost, r.Duplicated, r.LoggedTwice, r.Unlogged, r.Incomplete, r.FailedTurns, r.RefusedRan, r.SplitBrain, r.Gaps)
}

// The properties, as report.Violations keys.
const (
	propAccepted = "(a) accepted once, turn ended"
	propRefusal  = "(b) refusal atomic"
	propSingle   = "(c) single writer"
	propGapless  = "(d) gaps closed"
	propWriter   = "writer answers"
)

// check judges a quiet cluster's data against the four properties.
func check(seed uint64, d runData) report {
	r := report{Seed: seed}
	checkAccepted(&r, d)
	checkRefusals(&r, d)
	checkSingleWriter(&r, d)
	checkGaps(&r, d)
	return r
}

// userTexts indexes a history's user messages: text → indexes.
func userTexts(h []proctest.HistoryMessage) map[string][]int {
	out := map[string][]int{}
	for i, m := range h {
		if m.Role == "user" {
			out[m.Content] = append(out[m.Content], i)
		}
	}
	return out
}

// replied reports whether the user message h[i] is followed by the echo
// reply of its turn.
func replied(h []proctest.HistoryMessage, i int) bool {
	return i+1 < len(h) && h[i+1].Turn == h[i].Turn &&
		h[i+1].Message == proctest.Message{Role: "assistant", Content: h[i].Content}
}

// loggedTexts indexes a replay log's user_events: text → positions.
func loggedTexts(log []agent.Event) map[string][]agent.Position {
	out := map[string][]agent.Position{}
	for _, ev := range log {
		if ev.Type == agent.TypeUserEvent {
			t := userEventText(ev.Data)
			out[t] = append(out[t], ev.Pos())
		}
	}
	return out
}

// checkAccepted: (a) every accepted event appears exactly once in its
// session's history and in its replay log, and its turn ended: the echo
// reply of the same turn follows it, or (a user message with no reply: the
// store recorded a failed turn) the log holds a turn_failed with a reason
// for each such turn.
func checkAccepted(r *report, d runData) {
	users := map[string]map[string][]int{}
	logged := map[string]map[string][]agent.Position{}
	unanswered := map[string][]string{} // session → keys of accepted turns with no reply
	for id, h := range d.Histories {
		users[id] = userTexts(h)
	}
	for id, log := range d.Logs {
		logged[id] = loggedTexts(log)
	}
	for _, dl := range d.Deliveries {
		if len(dl.Answers) == 0 {
			continue // the run ended before its first attempt
		}
		if last := dl.Answers[len(dl.Answers)-1]; last.Kind == answerInvalid {
			r.violate(propWriter, "%s %s: answered %v", dl.Session, dl.Key, last)
		}
		for _, a := range dl.Answers {
			switch a.Kind {
			case answerRefused:
				r.Refusals++
			case answerUnknown:
				r.Open++
			}
		}
		switch {
		case dl.Accepted != nil:
			r.Accepted++
			if dl.Accepted.Duplicate {
				r.Duplicates++
			}
		case dl.refusedOnly(len(dl.Answers)):
			r.Refused++
			continue
		default:
			r.Unknown++
			continue
		}
		at := users[dl.Session][dl.Text]
		h := d.Histories[dl.Session]
		switch {
		case len(at) == 0:
			r.Lost++
			r.violate(propAccepted, "%s: %s accepted at %d-%d is not in the history (user_events in the log at %v)",
				dl.Session, dl.Key, dl.Accepted.Epoch, dl.Accepted.Seq, logged[dl.Session][dl.Text])
		case len(at) > 1:
			r.Duplicated++
			r.violate(propAccepted, "%s: %s is %d times in the history", dl.Session, dl.Key, len(at))
		case !replied(h, at[0]):
			unanswered[dl.Session] = append(unanswered[dl.Session], fmt.Sprintf("%s at %d-%d", dl.Key, dl.Accepted.Epoch, dl.Accepted.Seq))
		}
		switch at := logged[dl.Session][dl.Text]; {
		case len(at) == 0:
			r.Unlogged++
			r.violate(propAccepted, "%s: %s accepted at %d-%d has no user_event in the replay log",
				dl.Session, dl.Key, dl.Accepted.Epoch, dl.Accepted.Seq)
		case len(at) > 1:
			r.LoggedTwice++
			r.violate(propAccepted, "%s: %s has %d user_events in the replay log, at %v; answers: %s",
				dl.Session, dl.Key, len(at), at, answersString(dl.Answers))
		}
	}
	for id, keys := range unanswered {
		n, failed := len(keys), 0
		for _, ev := range d.Logs[id] {
			if ev.Type == agent.TypeTurnFailed && !bytes.Contains(ev.Data, []byte(`"error":""`)) {
				failed++
			}
		}
		r.FailedTurns += min(n, failed)
		if n > failed {
			r.Incomplete += n - failed
			r.violate(propAccepted, "%s: %d accepted events have no reply in the history (%s) and the log holds %d turn_failed",
				id, n, strings.Join(keys, ", "), failed)
		}
	}
}

// checkRefusals: (b) an event refused with nothing left open is nowhere:
// not in the history, not in the log; and a refused event is never later
// answered as a duplicate of itself.
func checkRefusals(r *report, d runData) {
	users := map[string]map[string][]int{}
	logged := map[string]map[string][]agent.Position{}
	for id, h := range d.Histories {
		users[id] = userTexts(h)
	}
	for id, log := range d.Logs {
		logged[id] = loggedTexts(log)
	}
	for _, dl := range d.Deliveries {
		n := len(dl.Answers)
		switch {
		case n == 0:
		case dl.Accepted == nil && dl.refusedOnly(n):
			inHistory, inLog := len(users[dl.Session][dl.Text]), len(logged[dl.Session][dl.Text])
			if inHistory > 0 || inLog > 0 {
				r.RefusedRan++
				r.violate(propRefusal, "%s: %s was refused (%v), yet is %d times in the history and %d in the log",
					dl.Session, dl.Key, dl.Answers[n-1], inHistory, inLog)
			}
		case dl.Accepted != nil && dl.Accepted.Duplicate && dl.refusedOnly(n-1):
			r.RefusedRan++
			r.violate(propRefusal, "%s: %s was answered %v, then 202 duplicate of %d-%d",
				dl.Session, dl.Key, answersString(dl.Answers[:n-1]), dl.Accepted.Epoch, dl.Accepted.Seq)
		case dl.Accepted != nil && n > 1 && dl.refusedOnly(n-1):
			// Accepted anew after refusals: a user_event of the key at
			// another position was logged by a refused attempt.
			acc := agent.Position{Epoch: dl.Accepted.Epoch, Seq: dl.Accepted.Seq}
			for _, p := range logged[dl.Session][dl.Text] {
				if p != acc {
					r.RefusedRan++
					r.violate(propRefusal, "%s: %s was answered %v, yet logged at %v, then accepted anew at %v",
						dl.Session, dl.Key, answersString(dl.Answers[:n-1]), p, acc)
					break
				}
			}
		}
	}
}

// answersString lists answers, runs of equal ones folded ("a: 503
// session_moving ×3").
func answersString(as []answer) string {
	if len(as) == 0 {
		return "nothing before"
	}
	var parts []string
	for i := 0; i < len(as); {
		j := i + 1
		for j < len(as) && as[j].String() == as[i].String() {
			j++
		}
		p := as[i].String()
		if as[i].Kind == answerAccepted {
			p = fmt.Sprintf("%s: 202", as[i].Node)
		}
		if j-i > 1 {
			p += fmt.Sprintf(" ×%d", j-i)
		}
		parts = append(parts, p)
		i = j
	}
	return strings.Join(parts, ", ")
}

// posKey names one position of one session.
type posKey struct {
	Session    string
	Epoch, Seq int64
}

// content is an event's type and compacted data: two events at one
// position are the same event when their contents are equal.
func content(typ string, data json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		return typ + " " + string(data)
	}
	return typ + " " + b.String()
}

// checkSingleWriter: (c) no position was written twice: every push any
// observer read and every log entry agree on what each (session, epoch,
// seq) holds, no two keys were accepted at one position, and the log holds
// each accepted event at the position its 202 gave.
func checkSingleWriter(r *report, d runData) {
	type held struct {
		typ     string
		data    json.RawMessage
		content string
	}
	at := map[posKey]held{}
	conflict := map[posKey]bool{}
	note := func(k posKey, typ string, data json.RawMessage, where string) {
		h := held{typ, data, content(typ, data)}
		prev, ok := at[k]
		if !ok {
			at[k] = h
			return
		}
		if prev.content != h.content && !conflict[k] {
			conflict[k] = true
			r.SplitBrain++
			r.violate(propSingle, "%s %d-%d holds %q and %q (%s)", k.Session, k.Epoch, k.Seq, prev.content, h.content, where)
		}
	}
	for id, log := range d.Logs {
		for _, ev := range log {
			note(posKey{id, ev.Epoch, ev.Seq}, ev.Type, ev.Data, "replay log")
		}
	}
	for _, o := range d.Observers {
		for _, ev := range o.Seen {
			note(posKey{o.Session, ev.Epoch, ev.Seq}, ev.Type, ev.Data, "pushed on "+o.Node)
		}
	}
	keys := map[posKey]string{}
	for _, dl := range d.Deliveries {
		if dl.Accepted == nil || dl.Accepted.Duplicate {
			continue
		}
		k := posKey{dl.Session, dl.Accepted.Epoch, dl.Accepted.Seq}
		if other, ok := keys[k]; ok {
			r.SplitBrain++
			r.violate(propSingle, "%s %d-%d accepted for %s and for %s", k.Session, k.Epoch, k.Seq, other, dl.Key)
			continue
		}
		keys[k] = dl.Key
		if h, ok := at[k]; ok && (h.typ != agent.TypeUserEvent || userEventText(h.data) != dl.Text) {
			r.SplitBrain++
			r.violate(propSingle, "%s %d-%d was answered 202 for %s, but holds %s", k.Session, k.Epoch, k.Seq, dl.Key, h.content)
		}
	}
}

// checkGaps: (d) each observer's record, after its final rejoin, is
// contiguous from seq 1 (within an epoch seq steps by one; a new epoch may
// step back, never jump) and is exactly the session's replay log.
func checkGaps(r *report, d runData) {
	for _, o := range d.Observers {
		if msg := recordGap(o.Record); msg != "" {
			r.Gaps++
			r.violate(propGapless, "observer of %s on %s: %s (%s)", o.Session, o.Node, msg, strings.Join(o.Holes, "; "))
			continue
		}
		if msg := diffLog(o.Record, d.Logs[o.Session]); msg != "" {
			r.Gaps++
			r.violate(propGapless, "observer of %s on %s: %s", o.Session, o.Node, msg)
		}
	}
}

// recordGap describes the first break in a record's contiguity ("" when
// there is none).
func recordGap(rec []phxtest.SessionEvent) string {
	for i, ev := range rec {
		if i == 0 {
			if ev.Seq != 1 {
				return fmt.Sprintf("starts at %d-%d", ev.Epoch, ev.Seq)
			}
			continue
		}
		prev := rec[i-1]
		if !pos(prev).Less(pos(ev)) || ev.Seq > prev.Seq+1 || ev.Epoch == prev.Epoch && ev.Seq != prev.Seq+1 {
			return fmt.Sprintf("%d-%d follows %d-%d", ev.Epoch, ev.Seq, prev.Epoch, prev.Seq)
		}
	}
	return ""
}

// diffLog describes how a record differs from the log ("" when equal):
// the events of the log the record lacks, the events it holds that the log
// does not, and the first difference.
func diffLog(rec []phxtest.SessionEvent, log []agent.Event) string {
	inLog := map[agent.Position]string{}
	for _, ev := range log {
		inLog[ev.Pos()] = content(ev.Type, ev.Data)
	}
	inRec := map[agent.Position]bool{}
	extra := 0
	for _, ev := range rec {
		inRec[pos(ev)] = true
		if c, ok := inLog[pos(ev)]; !ok || c != content(ev.Type, ev.Data) {
			extra++
		}
	}
	var missing []string
	for _, ev := range log {
		if !inRec[ev.Pos()] {
			missing = append(missing, fmt.Sprintf("%v %s", ev.Pos(), ev.Type))
		}
	}
	if len(missing) == 0 && extra == 0 {
		return ""
	}
	shown := missing
	if len(shown) > 5 {
		shown = append(shown[:5:5], "…")
	}
	return fmt.Sprintf("lacks %d logged events [%s], holds %d events the log does not (record %d events, log %d)",
		len(missing), strings.Join(shown, ", "), extra, len(rec), len(log))
}
