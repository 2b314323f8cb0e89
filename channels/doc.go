// Package channels speaks the Phoenix Channels wire protocol (phoenix.js
// 1.8.x, V1 and V2 serializers, V2 binary frames) and serves sockets: an
// Endpoint accepts WebSocket connections on /socket/websocket, each Socket
// runs the Phoenix state machine (heartbeats, join refs, duplicate joins,
// leaves, crashes, idle timeout) and routes topics to Handlers; a Hub fans
// broadcasts out to local channels, encoding each frame once per serializer.
// Source for every behaviour: docs/PHOENIX.md.
//
// Goroutines per socket: a reader that exists only while the socket has
// input (sockReader; one per socket where no readiness poller is
// available, or whoever calls Socket.Receive for an in-memory Transport) and
// a writer that exists only while frames are queued. The heartbeat timeout
// of all an endpoint's sockets is checked by one sweep (Endpoint.sweep).
//
// Malformed frames close the socket with 1007 (binary on V1: 1003), the way
// Phoenix crashes the connection; see errors.go for every close code and
// reply reason, and CloseCodeTable for a Markdown rendering.
//
// Lock order: Channel.subMu → Hub topic hookMu → Hub shard mu → Channel.mu →
// Socket.outMu; Socket.chMu is never held while taking another lock. Hub
// hooks run with the topic's hookMu held and no other lock.
package channels
