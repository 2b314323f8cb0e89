// Package memnet is an in-process network for muster.Transport, with fault
// injection for tests and the embedded single-node mode.
//
// A Network hands out Transports by node name. With no faults configured,
// delivery is deterministic: a message is placed in the receiver's inbox
// during the sender's Send, Broadcast or Call, and each receiver handles its
// inbox in order on its own goroutine, so messages from one sender to one
// receiver arrive in send order (per-sender FIFO). Handlers never run on the
// sender's goroutine, so a handler may itself Send or Call without
// reentrancy deadlocks.
//
// Faults are methods on the Network: Partition, Block and Heal cut links;
// SetLink and SetDefaultLink add per-link drop, delay, jitter, duplication and
// reordering; Freeze and Thaw hold a node's inbox; Kill stops a node as a
// crash would. Every random choice comes from one rand.Rand seeded by New, so
// a run with the same seed and the same sequence of sends makes the same
// choices (timing of delayed deliveries still depends on the scheduler).
//
// Fault decisions (block, drop, delay, duplicate, reorder) are taken when a
// message is sent; a partition that starts later does not catch messages
// already on their way.
//
// Counters (Sent, Total) count every message a node sends, per receiver,
// whatever its fate: a Broadcast counts once per receiving node and a Call
// counts its request (not its reply).
//
// Lock order: Network.mu is the only lock; handlers are always called
// without it.
package memnet
