package testenv

import (
	"context"
	"strings"
	"testing"
)

func TestRedisPrefixCleanedUp(t *testing.T) {
	ctx := context.Background()
	var prefix string
	client, _ := Redis(t)
	t.Run("inner", func(t *testing.T) {
		c, p := Redis(t)
		prefix = p
		if !strings.HasPrefix(p, "test:") || !strings.HasSuffix(p, ":") {
			t.Fatalf("prefix %q", p)
		}
		for _, k := range []string{"a", "b", "c:d"} {
			if err := c.Set(ctx, p+k, "1", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})
	keys, err := client.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Fatalf("keys left under %s: %v", prefix, keys)
	}
}
