package gateway

import (
	"strings"
	"testing"
)

// TestConfigRefusesPlaceholderSecrets: a credential left at the value
// deploy/k8s/secret.yaml ships is refused by Validate with an error naming
// the setting; real values, and values that merely contain the placeholder,
// pass.
func TestConfigRefusesPlaceholderSecrets(t *testing.T) {
	valid := func() Config {
		c := DefaultConfig()
		c.JWTSecret, c.AdminToken, c.APIKeys = "a-real-jwt-secret", "a-real-admin-token", []string{"key-1", "key-2"}
		c.DatabaseURL = "postgres://relay:s3cret@db:5432/relay?sslmode=disable"
		return c
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("real credentials refused: %v", err)
	}
	for _, tc := range []struct {
		name, want string
		mut        func(*Config)
	}{
		{"jwt", "JWT_SECRET is the placeholder", func(c *Config) { c.JWTSecret = PlaceholderSecret }},
		{"one api key of two", "API_KEYS is the placeholder", func(c *Config) { c.APIKeys = []string{"key-1", PlaceholderSecret} }},
		{"admin", "ADMIN_TOKEN is the placeholder", func(c *Config) { c.AdminToken = PlaceholderSecret }},
		// The Authenticator trims API keys and the admin token, so a padded
		// placeholder is the placeholder.
		{"api key padded", "API_KEYS is the placeholder", func(c *Config) { c.APIKeys = []string{"good-key-1234567", " " + PlaceholderSecret} }},
		{"admin padded", "ADMIN_TOKEN is the placeholder", func(c *Config) { c.AdminToken = " " + PlaceholderSecret + "\t" }},
		{"jwt padded", "JWT_SECRET is the placeholder", func(c *Config) { c.JWTSecret = PlaceholderSecret + " " }},
		{"database password keyword form", "DATABASE_URL has the placeholder password", func(c *Config) {
			c.DatabaseURL = "host=relay-postgres port=5432 user=relay dbname=relay password=" + PlaceholderDatabasePassword + " sslmode=disable"
		}},
		{"database password query parameter", "DATABASE_URL has the placeholder password", func(c *Config) {
			c.DatabaseURL = "postgres://relay@relay-postgres:5432/relay?sslmode=disable&password=" + PlaceholderDatabasePassword
		}},
		{"database password", "DATABASE_URL has the placeholder password", func(c *Config) {
			c.DatabaseURL = "postgres://relay:" + PlaceholderDatabasePassword + "@relay-postgres:5432/relay?sslmode=disable"
		}},
	} {
		c := valid()
		tc.mut(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		mut  func(*Config)
	}{
		{"placeholder as a prefix", func(c *Config) { c.JWTSecret = PlaceholderSecret + "-0f3a9c" }},
		{"placeholder as the database user", func(c *Config) { c.DatabaseURL = "postgres://" + PlaceholderDatabasePassword + ":pw@db/relay" }},
		{"database without password", func(c *Config) { c.DatabaseURL = "postgres://relay@db/relay" }},
		{"no admin token", func(c *Config) { c.AdminToken = "" }},
		{"keyword form with a real password", func(c *Config) { c.DatabaseURL = "host=db user=relay dbname=relay password=s3cret" }},
	} {
		c := valid()
		tc.mut(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: refused: %v", tc.name, err)
		}
	}
}
