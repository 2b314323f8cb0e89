package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisURL is used when TEST_REDIS_URL is unset.
const DefaultRedisURL = "redis://127.0.0.1:6379/0"

// RedisServerURL returns TEST_REDIS_URL or DefaultRedisURL.
func RedisServerURL() string { return env("TEST_REDIS_URL", DefaultRedisURL) }

// Redis returns a client of the test Redis and a key prefix unique to this
// test ("test:<random>:<name>:"). When the test ends every key under the
// prefix is deleted and the client is closed.
func Redis(t testing.TB) (redis.UniversalClient, string) {
	t.Helper()
	SkipIfShort(t, "Redis")
	client := redisClient(t)
	prefix := RedisPrefix(t, client)
	return client, prefix
}

// RedisPrefix reserves a key prefix unique to this test on client and
// deletes every key under it when the test ends. Use it for gateway
// processes that take a prefix as configuration.
func RedisPrefix(t testing.TB, client redis.UniversalClient) string {
	t.Helper()
	SkipIfShort(t, "Redis")
	prefix := "test:" + uniqueName("", t.Name()) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := client.Scan(ctx, 0, prefix+"*", 500).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("testenv: scan redis keys %s*: %v", prefix, err)
			return
		}
		if len(keys) > 0 {
			if err := client.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("testenv: delete redis keys %s*: %v", prefix, err)
			}
		}
	})
	return prefix
}

func redisClient(t testing.TB) redis.UniversalClient {
	t.Helper()
	opts, err := redis.ParseURL(RedisServerURL())
	if err != nil {
		t.Fatalf("testenv: TEST_REDIS_URL: %v", err)
	}
	client := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		t.Fatalf("testenv: Redis at %s is not reachable: %v (start it or set TEST_REDIS_URL)", redact(RedisServerURL()), err)
	}
	// Registered before the prefix cleanup, so it runs after it.
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// ShiftRedisTTLs makes d of time pass for the expiring keys under prefix:
// each key's remaining TTL shrinks by d, and keys whose TTL runs out are
// deleted, as Redis would expire them.
func ShiftRedisTTLs(t interface{ Fatalf(string, ...any) }, client redis.UniversalClient, prefix string, d time.Duration) {
	ctx := context.Background()
	iter := client.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		pttl, err := client.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatalf("pttl %s: %v", key, err)
		}
		if pttl < 0 { // no expiry (or gone)
			continue
		}
		if left := pttl - d; left <= 0 {
			err = client.Del(ctx, key).Err()
		} else {
			err = client.PExpire(ctx, key, left).Err()
		}
		if err != nil {
			t.Fatalf("shift ttl of %s: %v", key, err)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("scan %s*: %v", prefix, err)
	}
}
