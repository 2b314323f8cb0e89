package memnet_test

import (
	"testing"

	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/muster/memnet"
	"github.com/relaygw/relay/muster/memnet/transporttest"
)

func TestContract(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) func(string) muster.Transport {
		n := memnet.New(1)
		t.Cleanup(n.Close)
		return func(name string) muster.Transport { return n.Transport(name) }
	})
}
