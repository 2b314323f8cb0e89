package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/relaygw/relay/gateway"
)

// maxTokenTTL bounds `gateway token --ttl`: a year. Tokens cannot be revoked
// short of rotating JWT_SECRET, so an unbounded one is refused.
const maxTokenTTL = 366 * 24 * time.Hour

// tokenCmd mints an HS256 JWT the way the gateway verifies it (gateway.Claims:
// sub, sessions, iat, exp) and prints it on stdout with a newline.
type tokenCmd struct {
	JWTSecret string        `name:"jwt-secret" env:"JWT_SECRET" required:"" help:"HS256 secret the gateway nodes verify with (the same JWT_SECRET)."`
	Sub       string        `name:"sub" required:"" help:"Subject: who the token is for (the JWT sub claim)."`
	Sessions  []string      `name:"sessions" required:"" help:"Comma-separated session ids the bearer may join or post to: an exact id, a prefix ending in * (demo-*), or * for all."`
	TTL       time.Duration `name:"ttl" default:"1h" help:"How long the token is valid (at most 8784h, a year)."`
}

// Run checks the inputs and writes the token to out.
func (t *tokenCmd) Run(out io.Writer) error {
	tok, err := t.mint()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, tok)
	return err
}

func (t *tokenCmd) mint() (string, error) {
	switch {
	case t.JWTSecret == "":
		return "", errors.New("token: JWT_SECRET (or --jwt-secret) is required")
	case strings.TrimSpace(t.Sub) == "":
		return "", errors.New("token: --sub must not be empty")
	case t.TTL <= 0 || t.TTL > maxTokenTTL:
		return "", fmt.Errorf("token: --ttl %v must be positive and at most %v", t.TTL, maxTokenTTL)
	}
	sessions := make([]string, 0, len(t.Sessions))
	for _, s := range t.Sessions {
		if s = strings.TrimSpace(s); s == "" {
			return "", errors.New("token: --sessions has an empty entry")
		}
		sessions = append(sessions, s)
	}
	if len(sessions) == 0 {
		return "", errors.New("token: --sessions needs at least one session id, prefix* or *")
	}
	return gateway.NewAuthenticator(t.JWTSecret, nil, "").Mint(t.Sub, sessions, t.TTL)
}

// secretCmd prints Bytes random bytes in hex: a value for JWT_SECRET,
// API_KEYS or ADMIN_TOKEN.
type secretCmd struct {
	Bytes int `name:"bytes" default:"32" help:"Random bytes (printed as twice as many hex digits); 16 to 64."`
}

// Run writes the secret to out.
func (s *secretCmd) Run(out io.Writer) error {
	if s.Bytes < 16 || s.Bytes > 64 {
		return fmt.Errorf("secret: --bytes %d must be between 16 and 64", s.Bytes)
	}
	b := make([]byte, s.Bytes)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	_, err := fmt.Fprintln(out, hex.EncodeToString(b))
	return err
}
