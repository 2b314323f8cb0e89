// Package k8s_test checks the Kubernetes manifests of this directory without
// a cluster or the Kubernetes schemas (not reachable offline): each document
// is decoded strictly into the subset of the Kubernetes types the deployment
// relies on — an unknown or misspelt field fails — and the invariants between
// them are checked: probes on /readyz and /healthz (startup and liveness),
// a preStop drain that ends before the grace period, a grace period above
// DRAIN_WINDOW, selectors that match the pods, settings that are the
// gateway's own, the "restricted" Pod Security Standard, hostname
// anti-affinity, client-address session affinity for LongPoll, GOMEMLIMIT
// from the memory limit, and the Secret's placeholders being exactly the
// values the gateway refuses.
package k8s_test

import (
	"bytes"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/gateway"
	"go.yaml.in/yaml/v3"
)

type meta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type selector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
	PeriodSeconds    int `yaml:"periodSeconds"`
	FailureThreshold int `yaml:"failureThreshold"`
}

type container struct {
	Name            string `yaml:"name"`
	Image           string `yaml:"image"`
	ImagePullPolicy string `yaml:"imagePullPolicy"`
	Ports           []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
		Protocol      string `yaml:"protocol"`
	} `yaml:"ports"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
			ResourceFieldRef *struct {
				Resource string `yaml:"resource"`
				Divisor  string `yaml:"divisor"`
			} `yaml:"resourceFieldRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `yaml:"name"`
		} `yaml:"configMapRef"`
		SecretRef *struct {
			Name string `yaml:"name"`
		} `yaml:"secretRef"`
	} `yaml:"envFrom"`
	StartupProbe   probe `yaml:"startupProbe"`
	ReadinessProbe probe `yaml:"readinessProbe"`
	LivenessProbe  probe `yaml:"livenessProbe"`
	Lifecycle      struct {
		PreStop struct {
			Exec struct {
				Command []string `yaml:"command"`
			} `yaml:"exec"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	SecurityContext struct {
		RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
}

type deployment struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   meta   `yaml:"metadata"`
	Spec       struct {
		Replicas int      `yaml:"replicas"`
		Selector selector `yaml:"selector"`
		Strategy struct {
			Type          string `yaml:"type"`
			RollingUpdate struct {
				MaxUnavailable int `yaml:"maxUnavailable"`
				MaxSurge       int `yaml:"maxSurge"`
			} `yaml:"rollingUpdate"`
		} `yaml:"strategy"`
		Template struct {
			Metadata meta `yaml:"metadata"`
			Spec     struct {
				TerminationGracePeriodSeconds int   `yaml:"terminationGracePeriodSeconds"`
				AutomountServiceAccountToken  *bool `yaml:"automountServiceAccountToken"`
				SecurityContext               struct {
					RunAsNonRoot   *bool `yaml:"runAsNonRoot"`
					RunAsUser      int   `yaml:"runAsUser"`
					RunAsGroup     int   `yaml:"runAsGroup"`
					SeccompProfile struct {
						Type string `yaml:"type"`
					} `yaml:"seccompProfile"`
				} `yaml:"securityContext"`
				Affinity struct {
					PodAntiAffinity struct {
						Preferred []struct {
							Weight          int `yaml:"weight"`
							PodAffinityTerm struct {
								TopologyKey   string   `yaml:"topologyKey"`
								LabelSelector selector `yaml:"labelSelector"`
							} `yaml:"podAffinityTerm"`
						} `yaml:"preferredDuringSchedulingIgnoredDuringExecution"`
					} `yaml:"podAntiAffinity"`
				} `yaml:"affinity"`
				Containers []container `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type configMap struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   meta              `yaml:"metadata"`
	Type       string            `yaml:"type"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
}

type pdb struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   meta   `yaml:"metadata"`
	Spec       struct {
		MaxUnavailable int      `yaml:"maxUnavailable"`
		Selector       selector `yaml:"selector"`
	} `yaml:"spec"`
}

type service struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   meta   `yaml:"metadata"`
	Spec       struct {
		Selector              map[string]string `yaml:"selector"`
		SessionAffinity       string            `yaml:"sessionAffinity"`
		SessionAffinityConfig struct {
			ClientIP struct {
				TimeoutSeconds int `yaml:"timeoutSeconds"`
			} `yaml:"clientIP"`
		} `yaml:"sessionAffinityConfig"`
		Ports []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
			Protocol   string `yaml:"protocol"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type kustomization struct {
	APIVersion string   `yaml:"apiVersion"`
	Kind       string   `yaml:"kind"`
	Resources  []string `yaml:"resources"`
}

// decodeStrict decodes the single document of file into v, refusing
// unknown fields.
func decodeStrict(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: want one document (err %v)", file, err)
	}
}

// gatewayEnv is every environment variable gateway.Config reads.
func gatewayEnv() map[string]bool {
	env := map[string]bool{}
	typ := reflect.TypeOf(gateway.Config{})
	for i := range typ.NumField() {
		if e := typ.Field(i).Tag.Get("env"); e != "" {
			env[e] = true
		}
	}
	return env
}

// runtimeEnv are the container's environment variables that are not
// gateway settings: Go's soft memory limit and the value it is made from.
var runtimeEnv = map[string]bool{"GOMEMLIMIT": true, "MEMORY_LIMIT_MIB": true}

// checkRestricted checks the fields the "restricted" Pod Security Standard
// requires of the pod and its container: runAsNonRoot (pod or container)
// with a non-root user, seccomp RuntimeDefault, allowPrivilegeEscalation
// false and all capabilities dropped, each set explicitly; and a read-only
// root filesystem (not required by the standard; the gateway writes no
// file). What the standard forbids (host namespaces, hostPath volumes,
// privileged containers, host ports, added capabilities) is refused by the
// strict decoding, which does not know those fields, and by
// checkNoHostAccess.
func checkRestricted(t *testing.T, podNonRoot *bool, runAsUser int, seccomp string, c container) {
	t.Helper()
	csc := c.SecurityContext
	isTrue := func(b *bool) bool { return b != nil && *b }
	isFalse := func(b *bool) bool { return b != nil && !*b }
	if !isTrue(podNonRoot) && !isTrue(csc.RunAsNonRoot) || runAsUser == 0 {
		t.Errorf("runAsNonRoot %v/%v, runAsUser %d: want runAsNonRoot true and a non-zero user", podNonRoot, csc.RunAsNonRoot, runAsUser)
	}
	if seccomp != "RuntimeDefault" {
		t.Errorf("pod securityContext.seccompProfile.type %q: want RuntimeDefault", seccomp)
	}
	if !isFalse(csc.AllowPrivilegeEscalation) {
		t.Error("container securityContext.allowPrivilegeEscalation: want false, set explicitly")
	}
	if !slices.Equal(csc.Capabilities.Drop, []string{"ALL"}) {
		t.Errorf("container capabilities.drop %v: want [ALL]", csc.Capabilities.Drop)
	}
	if !isTrue(csc.ReadOnlyRootFilesystem) {
		t.Error("container securityContext.readOnlyRootFilesystem: want true")
	}
}

// forbiddenFields are pod and container fields the Pod Security Standards
// (baseline and restricted) refuse or restrict.
var forbiddenFields = []string{"hostNetwork", "hostPID", "hostIPC", "hostUsers", "hostPath", "hostPort", "privileged", "procMount", "sysctls", "add", "appArmorProfile", "seLinuxOptions", "windowsOptions"}

// checkNoHostAccess fails for any forbidden field anywhere in file, with a
// message that names it (the strict decoding would refuse it too, as an
// unknown field).
func checkNoHostAccess(t *testing.T, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, n any)
	walk = func(path string, n any) {
		switch v := n.(type) {
		case map[string]any:
			for k, c := range v {
				if slices.Contains(forbiddenFields, k) {
					t.Errorf("%s: %s.%s is refused by the restricted Pod Security Standard", file, path, k)
				}
				walk(path+"."+k, c)
			}
		case []any:
			for i, c := range v {
				walk(path+"["+strconv.Itoa(i)+"]", c)
			}
		}
	}
	walk("", doc)
}

// quantity parses a Kubernetes memory quantity with a binary suffix (Ki,
// Mi, Gi, Ti) or none, in bytes.
func quantity(t *testing.T, q string) int64 {
	t.Helper()
	mult := int64(1)
	for i, suf := range []string{"Ki", "Mi", "Gi", "Ti"} {
		if n, ok := strings.CutSuffix(q, suf); ok {
			q, mult = n, int64(1)<<(10*(i+1))
			break
		}
	}
	n, err := strconv.ParseInt(q, 10, 64)
	if err != nil || n <= 0 {
		t.Fatalf("memory quantity %q: want a positive integer with Ki, Mi, Gi, Ti or no suffix", q)
	}
	return n * mult
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkMemoryLimit: GOMEMLIMIT is derived from limits.memory through the
// downward API and comes out, once the kubelet has expanded it, as a plain
// byte count (which Go accepts) between 90% and 97% of the limit: headroom
// for memory the Go runtime does not manage.
func checkMemoryLimit(t *testing.T, c container) {
	t.Helper()
	limit := quantity(t, c.Resources.Limits["memory"])
	env := map[string]string{}
	var gomemlimit, raw string
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil {
			r := e.ValueFrom.ResourceFieldRef
			if r.Resource != "limits.memory" {
				continue
			}
			div := quantity(t, r.Divisor)
			v = strconv.FormatInt((limit+div-1)/div, 10) // the kubelet rounds up
		}
		// $(NAME) expands to an earlier variable, as the kubelet does.
		v = envRef.ReplaceAllStringFunc(v, func(ref string) string {
			name := envRef.FindStringSubmatch(ref)[1]
			if x, ok := env[name]; ok {
				return x
			}
			return ref
		})
		env[e.Name] = v
		if e.Name == "GOMEMLIMIT" {
			gomemlimit, raw = v, e.Value
		}
	}
	bytes, err := strconv.ParseInt(gomemlimit, 10, 64)
	if err != nil {
		t.Fatalf("GOMEMLIMIT expands to %q: want a byte count derived from limits.memory", gomemlimit)
	}
	if ratio := float64(bytes) / float64(limit); ratio < 0.90 || ratio > 0.97 {
		t.Errorf("GOMEMLIMIT %d bytes is %.1f%% of limits.memory %d: want 90-97%%", bytes, 100*ratio, limit)
	}
	// A literal GOMEMLIMIT would not follow a changed limit.
	if !envRef.MatchString(raw) {
		t.Errorf("GOMEMLIMIT %q does not refer to the variable holding limits.memory", raw)
	}
}

// checkPlaceholders: the Secret ships exactly the placeholder credentials
// the gateway refuses (gateway.PlaceholderSecret and
// gateway.PlaceholderDatabasePassword), and Validate refuses each of them,
// naming the setting, so the manifests cannot be applied unedited.
func checkPlaceholders(t *testing.T, data map[string]string) {
	t.Helper()
	for _, k := range []string{"JWT_SECRET", "API_KEYS", "ADMIN_TOKEN"} {
		if data[k] != gateway.PlaceholderSecret {
			t.Errorf("secret.yaml %s = %q: want the placeholder the gateway refuses, %q", k, data[k], gateway.PlaceholderSecret)
		}
	}
	u, err := url.Parse(data["DATABASE_URL"])
	if err != nil || u.User == nil {
		t.Fatalf("secret.yaml DATABASE_URL %q: want a URL with user and password", data["DATABASE_URL"])
	}
	if pw, _ := u.User.Password(); pw != gateway.PlaceholderDatabasePassword {
		t.Errorf("secret.yaml DATABASE_URL password %q: want the placeholder the gateway refuses, %q", pw, gateway.PlaceholderDatabasePassword)
	}
	for _, k := range []string{"JWT_SECRET", "API_KEYS", "ADMIN_TOKEN", "DATABASE_URL"} {
		cfg := gateway.DefaultConfig()
		cfg.JWTSecret, cfg.APIKeys, cfg.AdminToken = "a-real-secret", []string{"a-real-key"}, "a-real-token"
		switch k {
		case "JWT_SECRET":
			cfg.JWTSecret = data[k]
		case "API_KEYS":
			cfg.APIKeys = strings.Split(data[k], ",")
		case "ADMIN_TOKEN":
			cfg.AdminToken = data[k]
		case "DATABASE_URL":
			cfg.DatabaseURL = data[k]
		}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("secret.yaml's %s: the gateway's Validate() = %v, want a refusal naming %s", k, err, k)
		}
	}
}

func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestManifests(t *testing.T) {
	var (
		dep  deployment
		cm   configMap
		sec  configMap
		bud  pdb
		svc  service
		kust kustomization
	)
	// Before the strict decoding, which would refuse these as unknown fields
	// with a less telling message.
	checkNoHostAccess(t, "deployment.yaml")
	decodeStrict(t, "deployment.yaml", &dep)
	decodeStrict(t, "configmap.yaml", &cm)
	decodeStrict(t, "secret.yaml", &sec)
	decodeStrict(t, "pdb.yaml", &bud)
	decodeStrict(t, "service.yaml", &svc)
	decodeStrict(t, "kustomization.yaml", &kust)

	kinds := map[string][2]string{
		"Deployment": {dep.APIVersion, dep.Kind}, "ConfigMap": {cm.APIVersion, cm.Kind}, "Secret": {sec.APIVersion, sec.Kind},
		"PodDisruptionBudget": {bud.APIVersion, bud.Kind}, "Service": {svc.APIVersion, svc.Kind},
	}
	wantAPI := map[string]string{"Deployment": "apps/v1", "ConfigMap": "v1", "Secret": "v1", "PodDisruptionBudget": "policy/v1", "Service": "v1"}
	for kind, got := range kinds {
		if got != [2]string{wantAPI[kind], kind} {
			t.Errorf("%s: apiVersion/kind %v", kind, got)
		}
	}

	// Every manifest here is in the kustomization.
	files, _ := filepath.Glob("*.yaml")
	for _, f := range files {
		if f != "kustomization.yaml" && !slices.Contains(kust.Resources, f) {
			t.Errorf("kustomization.yaml lacks %s", f)
		}
	}

	pod := dep.Spec.Template
	if !subset(dep.Spec.Selector.MatchLabels, pod.Metadata.Labels) || !subset(bud.Spec.Selector.MatchLabels, pod.Metadata.Labels) || !subset(svc.Spec.Selector, pod.Metadata.Labels) {
		t.Errorf("a selector does not match the pod labels %v", pod.Metadata.Labels)
	}
	if dep.Spec.Replicas < 2 || bud.Spec.MaxUnavailable != 1 || dep.Spec.Strategy.RollingUpdate.MaxUnavailable != 0 {
		t.Errorf("replicas %d, PDB maxUnavailable %d, rolling maxUnavailable %d: want >=2, 1, 0",
			dep.Spec.Replicas, bud.Spec.MaxUnavailable, dep.Spec.Strategy.RollingUpdate.MaxUnavailable)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]

	// Probes and ports.
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != 4000 {
		t.Errorf("ports %+v: want http 4000", c.Ports)
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" ||
		c.ReadinessProbe.HTTPGet.Port != "http" || c.LivenessProbe.HTTPGet.Port != "http" {
		t.Errorf("probes: readiness %+v liveness %+v", c.ReadinessProbe.HTTPGet, c.LivenessProbe.HTTPGet)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort != "http" {
		t.Errorf("service ports %+v: want targetPort http", svc.Spec.Ports)
	}

	// The startup probe holds the liveness probe off while the node connects
	// its stores and migrates (the listener opens after): on /healthz, with
	// at least a minute before the kubelet gives up.
	sp := c.StartupProbe
	if sp.HTTPGet.Path != "/healthz" || sp.HTTPGet.Port != "http" || sp.PeriodSeconds < 1 || sp.PeriodSeconds*sp.FailureThreshold < 60 {
		t.Errorf("startupProbe %+v: want /healthz on http, periodSeconds x failureThreshold >= 60 s", sp)
	}

	checkRestricted(t, pod.Spec.SecurityContext.RunAsNonRoot, pod.Spec.SecurityContext.RunAsUser, pod.Spec.SecurityContext.SeccompProfile.Type, c)
	if a := pod.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Error("automountServiceAccountToken: want false (the gateway does not call the Kubernetes API)")
	}
	// The runtime stage runs as distroless's nonroot user (65532).
	if pod.Spec.SecurityContext.RunAsUser != 65532 || pod.Spec.SecurityContext.RunAsGroup != 65532 {
		t.Errorf("runAsUser/runAsGroup %d/%d: want the image's nonroot 65532", pod.Spec.SecurityContext.RunAsUser, pod.Spec.SecurityContext.RunAsGroup)
	}

	// Anti-affinity: pods prefer distinct hosts.
	anti := pod.Spec.Affinity.PodAntiAffinity.Preferred
	spread := false
	for _, p := range anti {
		term := p.PodAffinityTerm
		spread = spread || p.Weight > 0 && term.TopologyKey == "kubernetes.io/hostname" && subset(term.LabelSelector.MatchLabels, pod.Metadata.Labels)
	}
	if !spread {
		t.Errorf("podAntiAffinity %+v: want a preferred term on kubernetes.io/hostname selecting the pod labels %v", anti, pod.Metadata.Labels)
	}

	// LongPoll: a poll on another node is answered 410, so the Service keeps
	// a client on one pod; each poll (every LONGPOLL_WINDOW at most)
	// refreshes the affinity.
	longpoll := gateway.DefaultConfig().LongPollWindow
	if v, ok := cm.Data["LONGPOLL_WINDOW"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("LONGPOLL_WINDOW %q: %v", v, err)
		}
		longpoll = d
	}
	affinity := time.Duration(svc.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds) * time.Second
	if svc.Spec.SessionAffinity != "ClientIP" || affinity <= longpoll || affinity > 24*time.Hour {
		t.Errorf("service sessionAffinity %q, timeout %v: want ClientIP, above LONGPOLL_WINDOW (%v) and at most 24h", svc.Spec.SessionAffinity, affinity, longpoll)
	}

	checkMemoryLimit(t, c)
	docker, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(docker, []byte("USER nonroot:nonroot")) || !bytes.Contains(docker, []byte(`ENTRYPOINT ["/gateway"]`)) {
		t.Error("the Dockerfile's runtime stage is not /gateway as nonroot, as the pod assumes")
	}

	// preStop: gateway drain --wait with a timeout above DRAIN_WINDOW and
	// below the grace period.
	cmd := c.Lifecycle.PreStop.Exec.Command
	if len(cmd) < 2 || cmd[0] != "/gateway" || cmd[1] != "drain" || !slices.Contains(cmd, "--wait") {
		t.Fatalf("preStop %q: want /gateway drain --wait", cmd)
	}
	i := slices.Index(cmd, "--timeout")
	if i < 0 || i+1 >= len(cmd) {
		t.Fatalf("preStop %q lacks --timeout", cmd)
	}
	stopTimeout, err := time.ParseDuration(cmd[i+1])
	if err != nil {
		t.Fatal(err)
	}
	drain, err := time.ParseDuration(cm.Data["DRAIN_WINDOW"])
	if err != nil {
		t.Fatalf("DRAIN_WINDOW %q: %v", cm.Data["DRAIN_WINDOW"], err)
	}
	grace := time.Duration(pod.Spec.TerminationGracePeriodSeconds) * time.Second
	if !(drain < stopTimeout && stopTimeout < grace) {
		t.Errorf("want DRAIN_WINDOW (%v) < preStop --timeout (%v) < terminationGracePeriodSeconds (%v)", drain, stopTimeout, grace)
	}

	// Settings: the ConfigMap and Secret the pod reads exist, and every key
	// in them is a gateway setting; the secret holds the credentials.
	var refs []string
	for _, e := range c.EnvFrom {
		switch {
		case e.ConfigMapRef != nil:
			refs = append(refs, "cm:"+e.ConfigMapRef.Name)
		case e.SecretRef != nil:
			refs = append(refs, "secret:"+e.SecretRef.Name)
		}
	}
	if !slices.Contains(refs, "cm:"+cm.Metadata.Name) || !slices.Contains(refs, "secret:"+sec.Metadata.Name) {
		t.Errorf("envFrom %v does not read %s and %s", refs, cm.Metadata.Name, sec.Metadata.Name)
	}
	known := gatewayEnv()
	for k := range cm.Data {
		if !known[k] {
			t.Errorf("ConfigMap key %s is not a gateway setting", k)
		}
	}
	for k := range sec.StringData {
		if !known[k] {
			t.Errorf("Secret key %s is not a gateway setting", k)
		}
	}
	for _, k := range []string{"JWT_SECRET", "ADMIN_TOKEN", "API_KEYS"} {
		if sec.StringData[k] == "" {
			t.Errorf("Secret lacks %s", k)
		}
		if _, ok := cm.Data[k]; ok {
			t.Errorf("%s is in the ConfigMap, not the Secret", k)
		}
	}
	if _, ok := sec.StringData["ADMIN_TOKEN"]; !ok {
		t.Error("the preStop drain needs ADMIN_TOKEN in the pod's environment")
	}
	for _, e := range c.Env {
		if !known[e.Name] && !runtimeEnv[e.Name] {
			t.Errorf("env %s is not a gateway setting", e.Name)
		}
		if e.Name == "NODE_NAME" && (e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name") {
			t.Error("NODE_NAME is not the pod name")
		}
	}

	checkPlaceholders(t, sec.StringData)
	if !strings.HasPrefix(c.Image, "relay:") {
		t.Errorf("image %q", c.Image)
	}
}
