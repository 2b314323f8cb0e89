// Package deploy_test checks docker-compose.yml without a Docker engine: the
// three gateway nodes are built from the Dockerfile, reach the services by
// their compose names, have distinct names and host ports, read only gateway
// settings, take their credentials from the environment (no placeholder the
// gateway refuses), and get more than DRAIN_WINDOW to stop.
package deploy_test

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/gateway"
	"go.yaml.in/yaml/v3"
)

type composeFile struct {
	Services map[string]struct {
		Build           string            `yaml:"build"`
		Image           string            `yaml:"image"`
		Profiles        []string          `yaml:"profiles"`
		StopGracePeriod string            `yaml:"stop_grace_period"`
		Environment     map[string]string `yaml:"environment"`
		Ports           []string          `yaml:"ports"`
		DependsOn       map[string]any    `yaml:"depends_on"`
	} `yaml:"services"`
}

func TestComposeRunsThreeGatewayNodes(t *testing.T) {
	b, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	typ := reflect.TypeOf(gateway.Config{})
	for i := range typ.NumField() {
		if e := typ.Field(i).Tag.Get("env"); e != "" {
			known[e] = true
		}
	}
	for _, s := range []string{"postgres", "redis", "nats"} {
		if _, ok := f.Services[s]; !ok {
			t.Errorf("service %s missing", s)
		}
	}
	names, ports := map[string]bool{}, map[string]bool{}
	drain := gateway.DefaultConfig().DrainWindow
	for _, node := range []string{"node1", "node2", "node3"} {
		s, ok := f.Services[node]
		if !ok {
			t.Fatalf("service %s missing", node)
		}
		if s.Build != "." || len(s.Ports) != 1 || !strings.HasSuffix(s.Ports[0], ":4000") {
			t.Errorf("%s: build %q ports %v", node, s.Build, s.Ports)
		}
		for k := range s.Environment {
			if !known[k] {
				t.Errorf("%s: %s is not a gateway setting", node, k)
			}
		}
		env := s.Environment
		if !strings.Contains(env["DATABASE_URL"], "@postgres:") || !strings.Contains(env["REDIS_URL"], "//redis:") || !strings.Contains(env["NATS_URL"], "//nats:") {
			t.Errorf("%s: store URLs %q %q %q do not name the compose services", node, env["DATABASE_URL"], env["REDIS_URL"], env["NATS_URL"])
		}
		for _, k := range []string{"JWT_SECRET", "API_KEYS", "ADMIN_TOKEN"} {
			if !strings.Contains(env[k], "${"+k+":?") {
				t.Errorf("%s: %s = %q, want it required from the environment", node, k, env[k])
			}
		}
		// No credential the gateway refuses (deploy/k8s/secret.yaml's
		// placeholders) as a value or a default.
		for k, v := range env {
			if strings.Contains(v, gateway.PlaceholderSecret) || strings.Contains(v, ":"+gateway.PlaceholderDatabasePassword+"@") {
				t.Errorf("%s: %s = %q holds a placeholder credential the gateway refuses", node, k, v)
			}
		}
		for _, d := range []string{"postgres", "redis", "nats"} {
			if _, ok := s.DependsOn[d]; !ok {
				t.Errorf("%s does not depend on %s", node, d)
			}
		}
		grace, err := time.ParseDuration(s.StopGracePeriod)
		if err != nil || grace <= drain {
			t.Errorf("%s: stop_grace_period %q, want above DRAIN_WINDOW %v", node, s.StopGracePeriod, drain)
		}
		names[env["NODE_NAME"]] = true
		ports[s.Ports[0]] = true
	}
	if len(names) != 3 || len(ports) != 3 || names[""] {
		t.Errorf("node names %v, ports %v: want three distinct each", names, ports)
	}
}
