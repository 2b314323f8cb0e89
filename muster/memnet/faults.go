package memnet

import "time"

// LinkFaults describes the faults of one directed link. The zero value is a
// perfect link: no loss, no delay, in-order delivery.
type LinkFaults struct {
	// Drop is the probability, in [0,1], that a message or Call request on
	// the link is lost. A lost Call request makes the Call wait until its
	// ctx ends. Replies travelling back over the link are dropped with the
	// same probability.
	Drop float64
	// Delay is added to every delivery on the link. Delayed messages keep
	// their send order.
	Delay time.Duration
	// Jitter is the upper bound of a random extra delay, uniform in
	// [0, Jitter], added to Delay. Jittered messages still keep their order.
	Jitter time.Duration
	// Duplicate is the probability, in [0,1], that a message is delivered
	// twice. Call requests are never duplicated.
	Duplicate float64
	// Reorder is the probability, in [0,1], that a message leaves the
	// in-order stream of its link and arrives after a random extra wait of
	// up to ReorderWindow, so later messages may overtake it.
	Reorder float64
	// ReorderWindow bounds the extra wait of a reordered message.
	// Zero means 5 ms.
	ReorderWindow time.Duration
}

// DefaultReorderWindow is the ReorderWindow used when a LinkFaults leaves it
// zero.
const DefaultReorderWindow = 5 * time.Millisecond

func (f LinkFaults) zero() bool { return f == LinkFaults{} }

// SetLink sets the faults of the directed link from → to, replacing the
// default for that link. SetLink(from, to, LinkFaults{}) makes the link
// perfect again.
func (n *Network) SetLink(from, to string, f LinkFaults) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults[link{from, to}] = f
}

// ClearLink removes the link's own faults so that it uses the default again.
func (n *Network) ClearLink(from, to string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.faults, link{from, to})
}

// SetDefaultLink sets the faults of every link that has no faults of its own
// (see SetLink).
func (n *Network) SetDefaultLink(f LinkFaults) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.deflt = f
}

func (n *Network) faultsLocked(l link) LinkFaults {
	if f, ok := n.faults[l]; ok {
		return f
	}
	return n.deflt
}

// Block cuts the directed link from → to: messages and Call requests from
// from to to are lost (a Call fails at once with muster.ErrNoResponders), and
// replies from to back to from are lost. The reverse link is unaffected,
// which makes asymmetric partitions.
func (n *Network) Block(from, to string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.blocked[link{from, to}] = true
}

// Unblock restores the directed link from → to.
func (n *Network) Unblock(from, to string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.blocked, link{from, to})
}

// Partition cuts every link between a node of a and a node of b, both ways.
// Links inside a and inside b are unaffected.
func (n *Network) Partition(a, b []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, x := range a {
		for _, y := range b {
			if x == y {
				continue
			}
			n.blocked[link{x, y}] = true
			n.blocked[link{y, x}] = true
		}
	}
}

// Heal removes every partition and block. Link faults set with SetLink and
// SetDefaultLink stay.
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.blocked)
}

// Freeze makes node name stop handling its inbox: messages and Call requests
// sent to it are held, in order, until Thaw. Handler calls already running
// finish. A frozen node can still send. Freezing a name that has no
// transport yet applies to the transport created under it later.
func (n *Network) Freeze(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.frozen[name] = true
	n.notifyLocked()
}

// Thaw lets a frozen node handle its held inbox again.
func (n *Network) Thaw(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.frozen, name)
	if t, ok := n.nodes[name]; ok {
		t.cond.Broadcast()
	}
	n.notifyLocked()
}

// Kill stops node name as a crash would: its inbox is discarded, no new
// handler call starts, messages sent to it are lost and Calls to it fail
// with muster.ErrNoResponders. The killed transport's own methods return
// muster.ErrTransportClosed. Kill does not wait for handler calls already
// running (so it may be called from a handler); the killed transport's Close
// does. A later Transport(name) creates a fresh node.
func (n *Network) Kill(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if t, ok := n.nodes[name]; ok {
		t.stopLocked()
	}
}
