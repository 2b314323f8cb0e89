// Package muster is group-routed fan-out: for every group it knows which
// nodes hold at least one local member, and names one router node per group
// through which a broadcast is routed. It is a Go port of the design of
// Forum.Muster (docs/MUSTER.md, "The design") with the
// corrections made upstream after it (docs/MUSTER.md, "History").
//
// # Protocol in brief
//
// A Scope runs a coordinator goroutine and Config.Shards claim shards. A
// group belongs to shard xxhash64(group) mod Shards. The shard owns the
// group's local members (Member: ID and a Done channel, the counterpart of a
// monitored pid) and its claim state machine: nil, occupied_pending,
// occupied, cooldown, vacant_queued, vacant_flushing. The first local member
// makes the shard tell the group's router (Call "occ", or a local upsert when
// we route it ourselves); concurrent first joins park behind one claim; the
// member is registered only when the router confirmed. The last member
// leaving starts the cooldown (default 30 s); a join during cooldown reclaims
// with no RPC (re-asserting the self row when we are our own router). After
// the cooldown the vacancy is queued, and each shard's periodic flush sends
// one batch per router (Call "vac"), retrying failed batches.
//
// The router-role occupancy table holds rows {group, source} → seq,
// present|tombstone. Every writer (claim, vacant batch, rebalance snapshot
// and delta, self-routed claims and flushes) goes through one seq-guarded
// upsert; vacancies write tombstones, never deletes; tombstones are reaped
// after TombstoneWindow. The occupancy, membership and claim-state tables
// belong to the Scope, not to the goroutines using them: a panicking shard is
// restarted and reconciles from them (live members re-adopted, outstanding
// assertions driven to retraction); a panicking coordinator is restarted
// under a new incarnation and rebuilds every shard too (one reset story).
// A join the shard was answering when it crashed gets ErrRestarted and its
// member is rolled back first: ErrRestarted always means nothing was
// registered.
//
// Each goroutine reads a typed mailbox (a sealed message interface per
// goroutine kind). A panic is a crash, never control flow: a coordinator
// handler that decides to start over (expelled; a prepare or round refused,
// or failed toward a member; a shard that missed the gather) returns a
// reset error up its call chain, and the loop restarts the coordinator
// exactly as after a crash. A Call's remote error carries a Code on the wire
// (RemoteError.Code; ErrNotPeer is CodeNotPeer), and callers match it with
// errors.Is, never by its text.
//
// The coordinator is the only writer of the ring (muster/ring, 128 virtual
// nodes per member, current and previous generation), the committed view,
// Status and ViewHash, which Router and Targets read lock-free. A membership
// change that adds a node runs the two-phase adoption: a prepare round asks
// every old member to invalidate us (an in-transition view entry at the
// round seq) while the ring stays unchanged and status is rebalancing; when
// all acked, the rebalance commits. A pure shrink commits at once; returning
// to the committed view cancels the round, raising our watermark past it and
// re-announcing. The rebalance follows the spec's numbered steps: status
// rebalancing and the new hash, ring swap, the snapshot seq cut, a
// synchronous gather from every shard (GatherTimeout; a shard that does not
// answer resets the coordinator), moved groups by current versus previous
// ring, a full snapshot to every member new to our view or still owed an
// un-acked round and a delta of moved groups to the others, bare markers to
// every member not owed, the guarded stale-row sweep, and the status
// recompute. A receiver applies a round on its coordinator, dropping a round
// not newer than the last from that source, and records the sender's view
// with the data.
//
// Rows of a group routed away and back. The sweep only judges rows for
// groups we no longer route, and only once the source agreed with our view
// at a watermark above the row. If the group moves back to us before that
// (a node joined and left again) and the source vacated it meanwhile (the
// vacancy went to the router in between), nothing would ever retract the
// row: the source's shrink sends a delta of the held groups that moved onto
// us, and the group is not held. So every rebalance round and marker
// carries the sender's last ring transition {seq, previous and current
// ring names}; the receiver tombstones in place the sender's present rows
// below that seq for groups that moved onto it in that transition (the
// held ones were re-sent at that seq, which wins over the tombstone).
// TestVacatedWhileRoutedAwayThenRoutedBack forces this ordering.
//
// A departure (silence, forced suspicion, a leaving peer, a newer
// incarnation) first leaves Ready when the departed incarnation is in the
// committed view, then removes its rows, then shrinks the view; Targets
// reads the rows between two checks of status and view hash. So no sender
// on the old view is told, with confidence, that a group has no holder the
// departed node still has (TestDepartureRowsGoneWhileReadyOnOldView).
//
// Readiness: each node keeps member_views, the newest-seq announcement
// {view hash, watermark} of every peer (from rounds, markers, the discovery
// handshake and the view heartbeat). A node is ready when every member's
// latest announcement is its own view. Targets(group, senderViewHash)
// answers {nodes, true} only when ready and the sender's hash matches;
// otherwise the caller floods. A coordinator starts converging and promotes
// itself to a ready singleton only after SingletonPromotion without peers.
// Announcements to a node we owe a snapshot (heartbeat markers, discover-ack
// piggyback) are withheld until the snapshot is acknowledged.
//
// Broadcast wiring (for the PubSub layer): the origin delivers to its own
// local members first; Router(group) → {RouteOK, router}: if the router is
// the origin it resolves Targets inline, otherwise it sends the message once
// to the router tagged with its ViewHash; the router re-checks that
// Router(group) still names itself, then forwards to Targets(group, hash)
// minus the origin, or floods every node the transport knows (not Members)
// when Targets answers !ok or it is no longer the router;
// {RouteRebalancing, members} → send to every member but self.
//
// # Failure detector
//
// Erlang gives Forum node up/down for free; here every node broadcasts a
// ping each PingInterval (default 1 s) and any message refreshes its
// sender's liveness. An incarnation silent for PeerDownAfter (default 5 s)
// is declared departed: its occupancy rows, view entry and owed round are
// dropped, later writes from it are refused, and the view shrinks at once.
// Pings double as node discovery (the first message from a new incarnation
// triggers a discover), and the view heartbeat (ViewHeartbeat, default
// 10 s) re-offers discovery to every live non-member.
//
// A departed incarnation is never re-admitted. When a departed node turns out
// to be alive (a false suspicion, or a partition that healed), the node that
// departed it answers its messages with an expelled notice, and the expelled
// node resets its coordinator under a new incarnation, which its peers treat
// as the old one's departure plus a join. A false suspicion therefore costs
// the suspected node a coordinator reset (ring back to [self], flooding as a
// router until it re-converges) and every peer two rebalances with full
// snapshots to and from it; after a healed partition both sides reset. No
// delivery is missed because of it: until every node agrees again, routers
// flood.
//
// # Incarnations and seqs: the translation hazard
//
// Forum's seqs come from one VM's monotonic counter, and a VM restart is seen
// by peers as a node going down. Here a process can restart under the same
// node name faster than its peers notice, so a restarted node's fresh seqs
// must still order after the old process's. Seq is the pair (incarnation,
// counter), compared lexicographically; the incarnation is the process start
// time in Unix nanoseconds (Config.Incarnation) and a coordinator reset
// inside a live process moves to max(old+1, now). Every row, view entry and
// applied-round entry is therefore attributed to the incarnation that wrote
// it (Seq.Inc), a source's seqs are monotonic across restarts, and a
// departure deletes only the departed incarnation's entries. Losing Muster's
// state in a live process (a coordinator reset) always takes a new
// incarnation (Finding D). A Config.Incarnation chosen by hand must exceed
// every incarnation the previous process of that name used.
//
// # Finding B
//
// Accepted and documented (as upstream did): right after s's coordinator
// resets, a router r that has not yet processed s's new incarnation is still
// ready on the old view; a fresh join on s that s now routes to itself is
// unknown to r, so a sender on r tagged with the old view gets {[], true}.
// The window closes when r hears s's new incarnation (its first message),
// at most about one PingInterval. TestFindingBResidualWindow characterises it.
//
// # View hash
//
// ViewHash is frozen: xxhash64 over the concatenation, for the members sorted
// by name, of "<name>\x00<incarnation in decimal>\n". It includes
// incarnations, so a restarted member changes the view. The ring ignores
// incarnations (RingConfig): xxhash64 of "<name>#<i>" for the virtual nodes,
// xxhash64 of the group for the key.
//
// # Logs, traces, metrics
//
// Info logs: peer down and coordinator resets (a node's start logs no
// routing lines at info). Debug logs: coordinator start, node up, every
// status transition, rebalance start (members added/removed, view hash) and
// summary, per-group claim decisions, claim results, cooldown, vacant
// flushes. Trace points
// (internal/trace; free with a nil Tracer) include muster_rebalance_start,
// muster_status_change, muster_peer_registered, muster_node_state_received,
// muster_occupied, muster_occupied_apply (span start/complete),
// muster_vacant_batch (span), muster_drop_stale_entry, muster_rediscover,
// muster_group_state, muster_view_prepare/_cancel, muster_transition_applied,
// muster_rebalance_marker, muster_round_apply, muster_shard_gather,
// muster_flush_tick, muster_rpc_result and muster_occupied_dispatch.
// Metrics are hooks (Metrics, nil allowed). Dump gives status, view hash,
// members, peers' views, owed snapshots, claim states and occupancy as JSON
// or text.
//
// # Drain
//
// Drain returns nil once every peer acknowledged and DrainSettle passed; a
// ctx that ends during the settle (every peer already acknowledged) also
// returns nil, since the hand-off is complete
// (TestDrainDeadlineDuringSettleIsDone). Only a ctx that ends before the
// last acknowledgement gives a *DrainError naming the peers left.
//
// # Tests
//
// Concurrency is tested with trace points and forced orderings (Park until
// a release event), never sleeps. Besides the orderings named above:
// TestShardCrashInLocalJoinWindows and TestShardCrashInRemoteJoinWindows
// (ErrRestarted registers nothing), TestLateRoundFailureAboutDepartedRouter
// (a late failure about a departed router does not reset), the transport
// contract suite in muster/memnet/transporttest (CallRemoteErrorCarriesCode)
// and TestRemoteErrorMatchesByCode.
//
// TestModel (MUSTER_MODEL_RUNS seeded runs, default 200; a failing seed
// prints its replay command) drives joins, leaves, member deaths, node
// adds, removes and restarts, shard crashes, coordinator resets, lossy
// links, two-sided partitions, one-way cuts, paused nodes and silences the
// failure detector really fires on, against its own record of successful
// joins, leaves, deaths and stops. During the run it checks that a ready
// router never omits a live holder on its view from Targets; after the
// faults stop, that every node is ready on one view, local members equal
// the record, Targets equal the record's holders and no non-router keeps a
// row; then it sweeps again and re-checks at once (stable convergence).
package muster
