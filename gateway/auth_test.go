package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/relaygw/relay/internal/testkit/phxtest"
)

// TestParseTokenRequiresExpiry: a token without exp, an expired one and one
// signed with another method are refused; a fresh HS256 token is accepted.
func TestParseTokenRequiresExpiry(t *testing.T) {
	a := NewAuthenticator("secret", nil, "")
	sign := func(m jwt.SigningMethod, claims jwt.MapClaims) string {
		tok, err := jwt.NewWithClaims(m, claims).SignedString([]byte("secret"))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	now := time.Now()
	for name, tok := range map[string]string{
		"no exp":  sign(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "u", "sessions": []string{"*"}}),
		"expired": sign(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "u", "exp": now.Add(-time.Minute).Unix()}),
		"HS512":   sign(jwt.SigningMethodHS512, jwt.MapClaims{"sub": "u", "exp": now.Add(time.Hour).Unix()}),
		"garbage": "not.a.token",
		"empty":   "",
	} {
		if _, err := a.ParseToken(tok); err == nil {
			t.Errorf("%s: token accepted", name)
		}
	}
	ok, err := a.Mint("u", []string{"s1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.ParseToken(ok)
	if err != nil || !c.Allows("s1") || c.Allows("s2") {
		t.Fatalf("fresh token: %v %v", c, err)
	}
}

// TestSocketClosedWhenTokenExpires: a joined socket is closed with 1001 when
// the token it joined with expires.
func TestSocketClosedWhenTokenExpires(t *testing.T) {
	n, srv, _ := testNode(t, nil)
	tok, err := n.Auth().Mint("u", []string{"*"}, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ws := phxtest.DialT(t, phxtest.URL(srv.URL, tok))
	ws.Join("session:exp1", map[string]any{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if _, err := ws.Read(ctx); err != nil {
			if got := websocket.CloseStatus(err); got != websocket.StatusGoingAway {
				t.Fatalf("socket ended with %v (%v), want close 1001", got, err)
			}
			return
		}
	}
}
