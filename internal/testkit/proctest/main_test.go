package proctest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

// helperEnv makes the test binary act as a stand-in node (see helperNode).
const helperEnv = "PROCTEST_HELPER_NODE"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		helperNode()
		return
	}
	if os.Getenv(parentEnv) == "1" {
		helperParent()
		return
	}
	goleak.VerifyTestMain(m)
}

// helperNode is a tiny process with a gateway's outward shape: it serves
// /readyz on ADDR (503 after SIGTERM), logs JSON lines, and exits 0 on a
// second SIGTERM or when /exit is requested.
func helperNode() {
	ln, err := net.Listen("tcp", os.Getenv("ADDR"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(2)
	}
	draining := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-draining:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusOK)
		}
	})
	go func() { _ = http.Serve(ln, mux) }()
	fmt.Fprintf(os.Stderr, "{\"level\":\"info\",\"msg\":\"listening\",\"node\":%q}\n", os.Getenv("NODE_NAME"))
	fmt.Println("plain stdout line")
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	close(draining)
	fmt.Fprintln(os.Stderr, `{"level":"info","msg":"draining"}`)
	<-sig
	fmt.Fprint(os.Stderr, `{"level":"info","msg":"stopped"}`) // no newline: flushed at exit
	os.Exit(0)
}
