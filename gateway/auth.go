package gateway

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Claims are the JWT claims a socket or API caller presents (HS256, signed
// with JWT_SECRET). Sessions lists the session ids the bearer may join or post
// to: an exact id, a prefix ending in "*" ("demo-*"), or "*" for all.
//
//	{"sub":"user-1","sessions":["s1","demo-*"],"exp":1767225600}
type Claims struct {
	Sessions []string `json:"sessions"`
	jwt.RegisteredClaims
}

// Allows reports whether the claims permit session id.
func (c *Claims) Allows(id string) bool {
	for _, p := range c.Sessions {
		if p == "*" || p == id {
			return true
		}
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(id, prefix) {
			return true
		}
	}
	return false
}

// Authenticator verifies socket tokens, API keys and the admin token.
type Authenticator struct {
	secret  []byte
	apiKeys []string
	admin   string
}

// NewAuthenticator returns an Authenticator. secret must be non-empty.
func NewAuthenticator(secret string, apiKeys []string, adminToken string) *Authenticator {
	keys := make([]string, 0, len(apiKeys))
	for _, k := range apiKeys {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	return &Authenticator{secret: []byte(secret), apiKeys: keys, admin: strings.TrimSpace(adminToken)}
}

var errBadToken = errors.New("gateway: invalid token")

// ParseToken verifies a JWT and returns its claims. Only HS256 is accepted,
// and exp is required and must be in the future (5 s leeway): a token that
// never expires is refused.
func (a *Authenticator) ParseToken(tok string) (*Claims, error) {
	if tok == "" {
		return nil, errBadToken
	}
	c := &Claims{}
	_, err := jwt.ParseWithClaims(tok, c, func(*jwt.Token) (any, error) { return a.secret, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithLeeway(5*time.Second), jwt.WithExpirationRequired())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadToken, err)
	}
	return c, nil
}

// Mint signs a token for sub allowing sessions, valid for ttl. It is used for
// the development token printed by the embedded default and by tests.
func (a *Authenticator) Mint(sub string, sessions []string, ttl time.Duration) (string, error) {
	now := time.Now()
	c := Claims{Sessions: sessions, RegisteredClaims: jwt.RegisteredClaims{
		Subject: sub, IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(a.secret)
}

// caller is who made an API request: a backend with an API key (any session)
// or a JWT bearer limited to its claims.
type caller struct {
	apiKey bool
	claims *Claims
}

func (c caller) allows(id string) bool { return c.apiKey || (c.claims != nil && c.claims.Allows(id)) }

type ctxKey int

const callerKey ctxKey = 0

func callerFrom(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey).(caller)
	return c
}

func bearer(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if tok, ok := strings.CutPrefix(h, "Bearer "); ok {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	return strings.TrimSpace(r.Header.Get("X-API-Key"))
}

func (a *Authenticator) isAPIKey(tok string) bool {
	for _, k := range a.apiKeys {
		if subtle.ConstantTimeCompare([]byte(k), []byte(tok)) == 1 {
			return true
		}
	}
	return false
}

// requireAPI accepts an API key (Authorization: Bearer <key> or X-API-Key) or
// a JWT; anything else is refused with 401 unauthorized.
func (a *Authenticator) requireAPI(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := bearer(r)
		var c caller
		if a.isAPIKey(tok) {
			c.apiKey = true
		} else if claims, err := a.ParseToken(tok); err == nil {
			c.claims = claims
		} else {
			writeError(w, errorf(http.StatusUnauthorized, CodeUnauthorized, "an API key or a valid token is required"))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey, c)))
	})
}

// requireAdmin accepts only the admin token. With no admin token configured
// every admin request is refused.
func (a *Authenticator) requireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := bearer(r)
		if a.admin == "" || subtle.ConstantTimeCompare([]byte(a.admin), []byte(tok)) != 1 {
			writeError(w, errorf(http.StatusUnauthorized, CodeUnauthorized, "the admin token is required"))
			return
		}
		next.ServeHTTP(w, r)
	})
}
