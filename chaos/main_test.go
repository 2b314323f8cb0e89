package chaos

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testkit/proctest"
	"go.uber.org/goleak"
)

// gatewayBin is the binary built once for the whole package; under -short
// it is not built (every test that runs it needs the services, and skips).
var gatewayBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		goleak.VerifyTestMain(m)
		return
	}
	dir, err := os.MkdirTemp("", "relay-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
	gatewayBin = filepath.Join(dir, "gateway")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	err = proctest.Build(ctx, gatewayBin, raceEnabled)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { _ = os.RemoveAll(dir) }))
}
