package gateway

import (
	"fmt"
	"net/url"
	"slices"
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
	switch {
	case c.JWTSecret == PlaceholderSecret:
		return refused("JWT_SECRET")
	case slices.Contains(c.APIKeys, PlaceholderSecret):
		return refused("API_KEYS")
	case c.AdminToken == PlaceholderSecret:
		return refused("ADMIN_TOKEN")
	}
	if u, err := url.Parse(c.DatabaseURL); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw == PlaceholderDatabasePassword {
			return fmt.Errorf("gateway: DATABASE_URL has the placeholder password %q from deploy/k8s/secret.yaml; set the database user's real password", PlaceholderDatabasePassword)
		}
	}
	return nil
}
