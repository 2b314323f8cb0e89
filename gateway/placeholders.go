package gateway

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The placeholder credentials deploy/k8s/secret.yaml ships, to be replaced
// before the manifests are applied. Validate refuses a configuration that
// still holds one (validatePlaceholders); deploy/k8s/manifests_test.go
// checks secret.yaml ships exactly these, so the two cannot drift apart.
const (
	// PlaceholderSecret is the value of JWT_SECRET, API_KEYS and ADMIN_TOKEN.
	PlaceholderSecret = "replace-me-with-gateway-secret"
	// PlaceholderDatabasePassword is the password of DATABASE_URL.
	PlaceholderDatabasePassword = "replace-me"
)

// validatePlaceholders refuses a credential left at its shipped placeholder
// value: anyone who has read the manifests could mint tokens (JWT_SECRET),
// post events (API_KEYS), drain nodes (ADMIN_TOKEN) or log in to the
// database. Development mode (JWT_SECRET unset) never meets it unless
// ADMIN_TOKEN or API_KEYS is set to the placeholder, which is refused there
// too: a published credential is no safer on a development node.
func (c Config) validatePlaceholders() error {
	refused := func(setting string) error {
		return fmt.Errorf("gateway: %s is the placeholder %q from deploy/k8s/secret.yaml; set a secret of your own (`gateway secret` prints one)", setting, PlaceholderSecret)
	}
	// The values are compared as they are used: the Authenticator trims
	// API keys and the admin token (and the presented credential), so
	// " replace-me-with-gateway-secret" works as the placeholder does.
	isPlaceholder := func(v string) bool { return strings.TrimSpace(v) == PlaceholderSecret }
	switch {
	case isPlaceholder(c.JWTSecret):
		return refused("JWT_SECRET")
	case slices.ContainsFunc(c.APIKeys, isPlaceholder):
		return refused("API_KEYS")
	case isPlaceholder(c.AdminToken):
		return refused("ADMIN_TOKEN")
	}
	// DATABASE_URL is parsed by pgx's own parser, the one the stores
	// connect with, so the password is found in every form pgx accepts:
	// URL userinfo, ?password=, keyword/value ("host=... password=...").
	// A URL pgx cannot parse is left to the connection to report.
	if c.DatabaseURL != "" {
		if pc, err := pgxpool.ParseConfig(c.DatabaseURL); err == nil && pc.ConnConfig.Password == PlaceholderDatabasePassword {
			return fmt.Errorf("gateway: DATABASE_URL has the placeholder password %q from deploy/k8s/secret.yaml; set the database user's real password", PlaceholderDatabasePassword)
		}
	}
	return nil
}
