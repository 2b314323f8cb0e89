// Package presence counts and lists who is connected.
//
// Census gives eventually consistent, cluster-wide member counts per group
// at a wire cost that does not grow with joins and leaves: each node keeps
// its own counts and broadcasts them to its peers on an interval (Forum's
// Census, seed 002 "Forum.Census: distributed counts"), and accepts counts
// only from peers it has registered through its own discovery (Forum #2038).
//
// Tracker is a node-local, Phoenix-compatible presence: it produces the
// presence_state payload and presence_diff payloads described in
// docs/PHOENIX.md §5 for the channels of one node. It is not replicated
// across the cluster; a topic's presence lists only members tracked on the
// same node.
package presence
