package muster

import "time"

// Metrics receives Muster's metric hooks. Methods are called synchronously
// from Muster's goroutines and must return quickly. A nil Metrics is valid.
type Metrics interface {
	// StatusChanged reports a status transition.
	StatusChanged(from, to Status)
	// Rebalanced reports one rebalance: held groups, moved groups, full
	// snapshots and deltas dispatched, and the time the coordinator spent.
	Rebalanced(held, moved, snapshots, deltas int, took time.Duration)
	// PeerUp and PeerDown report peer registration and departure.
	PeerUp(node string)
	PeerDown(node string)
	// ClaimRPC reports one occupied claim sent to a remote router.
	ClaimRPC(ok bool)
	// VacantBatch reports one vacant batch RPC of n groups.
	VacantBatch(ok bool, n int)
	// Flood reports a Targets call that could not decide (the caller floods).
	Flood()
}

type nopMetrics struct{}

func (nopMetrics) StatusChanged(Status, Status)                 {}
func (nopMetrics) Rebalanced(int, int, int, int, time.Duration) {}
func (nopMetrics) PeerUp(string)                                {}
func (nopMetrics) PeerDown(string)                              {}
func (nopMetrics) ClaimRPC(bool)                                {}
func (nopMetrics) VacantBatch(bool, int)                        {}
func (nopMetrics) Flood()                                       {}
