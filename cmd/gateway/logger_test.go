package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// TestLoggerDurationsCarryUnits: the node's log line encodes a duration
// with its unit ("1.5s"), as operators read it, not as bare seconds, and
// newLogger applies the level it is given.
func TestLoggerDurationsCarryUnits(t *testing.T) {
	log, err := newLogger("info")
	if err != nil {
		t.Fatal(err)
	}
	if core := log.Core(); !core.Enabled(zap.InfoLevel) || core.Enabled(zap.DebugLevel) {
		t.Fatalf("level: info enabled %v, debug enabled %v; want info only", core.Enabled(zap.InfoLevel), core.Enabled(zap.DebugLevel))
	}
	var buf bytes.Buffer
	logged := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(loggerEncoderConfig()), zapcore.AddSync(&buf), zap.InfoLevel))
	logged.Info("draining", zap.Duration("window", 1500*time.Millisecond))
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("log line %q: %v", buf.String(), err)
	}
	if line["window"] != "1.5s" || line["ts"] == nil {
		t.Fatalf("line %s: want window \"1.5s\" and a ts field", buf.String())
	}
}
