package gateway

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
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
