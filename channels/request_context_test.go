package channels

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type requestMarkKey struct{}

// TestSocketDoesNotRetainRequestContext checks that a socket's handler
// context carries nothing of the HTTP request that opened it (neither a
// middleware's value nor the server's): an idle socket does not keep the
// request's contexts alive for its whole life.
func TestSocketDoesNotRetainRequestContext(t *testing.T) {
	seen := make(chan [2]any, 1)
	h := newFuncHandler()
	h.join = func(ctx context.Context, ch *Channel, _ json.RawMessage) (JoinResult, error) {
		seen <- [2]any{ctx.Value(requestMarkKey{}), ctx.Value(http.ServerContextKey)}
		return JoinResult{}, nil
	}
	ep := NewEndpoint(EndpointConfig{})
	ep.Handle("room:*", h)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ep.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestMarkKey{}, "request")))
	}))
	defer srv.Close()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := ep.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	c := rawJoin(t, strings.TrimPrefix(srv.URL, "http://"))
	defer c.Close()
	got := <-seen
	if got[0] != nil || got[1] != nil {
		t.Fatalf("join context carries the request's values: mark %v, server %v", got[0], got[1])
	}
}
