package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/session"
)

// TestAnswerMapsEveryOutcome: the one mapping from session.Manager.Submit's
// outcome to the README's answers, for HTTP and for channel pushes.
func TestAnswerMapsEveryOutcome(t *testing.T) {
	n := &Node{metrics: newMetrics()}
	retry := session.RetryDirective{After: 2050 * time.Millisecond, Budget: 18050 * time.Millisecond} // NewRetryDirective(2s, 15s) without its jitter
	held := &session.LeaseHeldError{Key: "s1", Holder: "b/1", Epoch: 3, Remaining: 2 * time.Second}
	refused := func(err error) session.Outcome {
		return session.Outcome{Kind: session.OutcomeRefused, Retry: retry, Err: err}
	}
	failed := func(err error) session.Outcome { return session.Outcome{Kind: session.OutcomeFailed, Err: err} }
	for _, tc := range []struct {
		name   string
		out    session.Outcome
		status int
		code   string
	}{
		{"held", refused(held), http.StatusServiceUnavailable, CodeSessionMoving},
		{"held at the owner", refused(&session.RemoteError{Code: session.CodeLeaseHeld, Held: held}), http.StatusServiceUnavailable, CodeSessionMoving},
		{"draining", refused(session.ErrDraining), http.StatusServiceUnavailable, CodeDraining},
		{"closed", refused(session.ErrClosed), http.StatusServiceUnavailable, CodeDraining},
		{"owner draining", refused(&session.RemoteError{Code: session.CodeDraining}), http.StatusServiceUnavailable, CodeDraining},
		{"fenced", refused(session.ErrFenced), http.StatusServiceUnavailable, CodeSessionMoving},
		{"store", refused(fmt.Errorf("claim: %w", session.ErrStoreUnavailable)), http.StatusServiceUnavailable, CodeSessionMoving},
		{"owner store", refused(&session.RemoteError{Code: session.CodeUnavailable}), http.StatusServiceUnavailable, CodeSessionMoving},
		{"bad id", failed(session.ErrInvalidID), http.StatusBadRequest, CodeInvalidSessionID},
		{"busy", failed(session.ErrBusy), http.StatusTooManyRequests, CodeSessionBusy},
		{"owner busy", failed(&session.RemoteError{Code: session.CodeBusy}), http.StatusTooManyRequests, CodeSessionBusy},
		{"timeout", failed(fmt.Errorf("hop: %w", session.ErrForwardTimeout)), http.StatusGatewayTimeout, CodeForwardTimeout},
		{"owner internal", failed(&session.RemoteError{Code: session.CodeInternal, Message: "boom"}), http.StatusBadGateway, CodeForwardFailed},
		{"owner bad request", failed(&session.RemoteError{Code: session.CodeBadRequest}), http.StatusBadGateway, CodeForwardFailed},
		{"malformed reply", failed(fmt.Errorf("%w: malformed reply", session.ErrForwardFailed)), http.StatusBadGateway, CodeForwardFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ae := n.answer(tc.out)
			if ae == nil || ae.Status != tc.status || ae.Code != tc.code || ae.Message == "" {
				t.Fatalf("answer = %+v, want %d %s", ae, tc.status, tc.code)
			}
			w := httptest.NewRecorder()
			writeError(w, ae)
			push := ae.pushReply()
			if tc.out.Kind == session.OutcomeRefused {
				if ae.Retry == nil || ae.Retry.AfterMS != 2050 || ae.Retry.BudgetMS != 2050+16000 || w.Header().Get("Retry-After") != "3" {
					t.Fatalf("retry %+v, Retry-After %q; want after 2050 ms, budget 18050 ms, 3 s", ae.Retry, w.Header().Get("Retry-After"))
				}
				if push.Reason != "retry" || push.Fields["error"] != tc.code || push.Fields["retry"] != ae.Retry {
					t.Fatalf("push reply %+v", push)
				}
			} else if ae.Retry != nil || w.Header().Get("Retry-After") != "" || push.Reason != tc.code {
				t.Fatalf("a failure carries a retry directive: %+v, push %+v", ae, push)
			}
			if w.Code != tc.status {
				t.Fatalf("HTTP status %d", w.Code)
			}
		})
	}
	if got := testutilCount(t, n, "relay_events_refused_total"); got != 15 {
		t.Fatalf("relay_events_refused_total = %v, want one per answer (15)", got)
	}
	// A draining node says whether another node can take the session.
	single := &Node{metrics: newMetrics()}
	cluster := &Node{metrics: newMetrics(), cfg: Config{NATSURL: "nats://127.0.0.1:4222"}}
	_, one := single.answer(refused(session.ErrDraining))
	_, many := cluster.answer(refused(session.ErrDraining))
	if !strings.Contains(one.Message, "no other node") || !strings.Contains(many.Message, "another node will take") {
		t.Fatalf("draining messages: single node %q, cluster %q", one.Message, many.Message)
	}
	acc, ae := n.answer(session.Outcome{Kind: session.OutcomeAccepted, Accepted: session.Accepted{Session: "s1", Epoch: 2, Seq: 5, Duplicate: true}})
	if ae != nil || acc != (acceptedBody{Session: "s1", Epoch: 2, Seq: 5, Duplicate: true}) {
		t.Fatalf("accepted = %+v %v", acc, ae)
	}
}
