// Package presence counts and lists who is connected.
//
// Census gives eventually consistent, cluster-wide member counts per group
// at a wire cost that does not grow with joins and leaves: each node keeps
// its own counts and broadcasts them to its peers on an interval, and accepts
// counts only from peers it has registered through its own discovery
// (docs/MUSTER.md, "Census: counts" and correction 7 of "History").
//
// Replica is cluster-wide, Phoenix-compatible presence: each node owns its
// presences and replicates them to every other node as per-node records
// stamped with its incarnation and a clock (batched deltas, digests, state
// transfers), and drops a node's records when its Census declares the
// incarnation departed (CensusConfig.OnPeer); docs/PHOENIX.md §5.4. The
// gateway uses it for session topics.
package presence
