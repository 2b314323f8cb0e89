package gateway

import (
	"runtime"
	"testing"
)

// relay_build_info is 1 with the build's labels.
func TestBuildInfoGauge(t *testing.T) {
	m := newMetrics()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "relay_build_info" {
			continue
		}
		got := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if mf.GetMetric()[0].GetGauge().GetValue() != 1 || got["goversion"] != runtime.Version() || got["version"] == "" || got["commit"] == "" {
			t.Fatalf("relay_build_info %v = %v", got, mf.GetMetric()[0].GetGauge().GetValue())
		}
		return
	}
	t.Fatal("relay_build_info not registered")
}
