// Package k8s_test checks the Kubernetes manifests of this directory without
// a cluster or the Kubernetes schemas (not reachable offline): each document
// is decoded strictly into the subset of the Kubernetes types the deployment
// relies on — an unknown or misspelt field fails — and the invariants between
// them are checked: probes on /readyz and /healthz, a preStop drain that ends
// before the grace period, a grace period above DRAIN_WINDOW, selectors that
// match the pods, and settings that are the gateway's own.
package k8s_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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
			FieldRef struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
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
		AllowPrivilegeEscalation bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   bool `yaml:"readOnlyRootFilesystem"`
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
				TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
				SecurityContext               struct {
					RunAsNonRoot bool `yaml:"runAsNonRoot"`
					RunAsUser    int  `yaml:"runAsUser"`
					RunAsGroup   int  `yaml:"runAsGroup"`
				} `yaml:"securityContext"`
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
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
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

	// Non-root, as the image's distroless nonroot user (65532).
	sc := pod.Spec.SecurityContext
	if !sc.RunAsNonRoot || sc.RunAsUser != 65532 || c.SecurityContext.AllowPrivilegeEscalation || !c.SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("security context %+v %+v", sc, c.SecurityContext)
	}
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
		if !known[e.Name] {
			t.Errorf("env %s is not a gateway setting", e.Name)
		}
		if e.Name == "NODE_NAME" && (e.ValueFrom == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name") {
			t.Error("NODE_NAME is not the pod name")
		}
	}
	if !strings.HasPrefix(c.Image, "relay:") {
		t.Errorf("image %q", c.Image)
	}
}
