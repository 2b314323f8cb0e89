package channels

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Sentinel errors. Decoders wrap ErrMalformed with what was wrong; check with
// errors.Is.
var (
	// ErrMalformed: an inbound frame could not be decoded (not a 5-element
	// JSON array, a ref that is neither string, number nor null, a non-string
	// topic or event, a truncated binary header, ...).
	ErrMalformed = errors.New("channels: malformed frame")
	// ErrFieldTooLong: a binary frame field (join_ref, ref, topic, event or
	// status) is longer than 255 bytes (docs/PHOENIX.md §2.2).
	ErrFieldTooLong = errors.New("channels: binary frame field longer than 255 bytes")
	// ErrBinaryUnsupported: binary payloads cannot travel over the V1
	// serializer.
	ErrBinaryUnsupported = errors.New("channels: binary payload on a V1 socket")
	// ErrUnsupportedVersion: the vsn query parameter names no known
	// serializer (anything but missing, 1.x or 2.x).
	ErrUnsupportedVersion = errors.New("channels: unsupported serializer version")
	// ErrSocketClosed: the socket is closing or closed; nothing more is sent.
	ErrSocketClosed = errors.New("channels: socket closed")
	// ErrChannelClosed: the channel has ended; pushes are dropped.
	ErrChannelClosed = errors.New("channels: channel closed")
	// ErrShutdown: the endpoint is shutting down and accepts no new sockets.
	ErrShutdown = errors.New("channels: endpoint shut down")
)

// Reply reasons sent to clients in error replies:
// {"status":"error","response":{"reason":<reason>}}.
// Source: docs/PHOENIX.md §3.2-3.5 (the strings Phoenix itself sends).
const (
	// ReasonUnmatchedTopic answers a join on a topic with no route and any
	// non-join event on a topic the socket has not joined; join_ref is null.
	ReasonUnmatchedTopic = "unmatched topic"
	// ReasonTooManyChannels refuses a join beyond MaxChannels per socket.
	ReasonTooManyChannels = "too many channels joined"
	// ReasonJoinCrashed answers a join whose handler panicked.
	ReasonJoinCrashed = "join crashed"
	// ReasonChannelCrash is the phx_error payload reason sent when HandleIn
	// panics; the channel is removed, the socket stays.
	ReasonChannelCrash = "channel_crash"
	// ReasonInternal answers a push whose handler returned an error that is
	// not a *ReplyError (the error is logged, never sent).
	ReasonInternal = "internal"
	// ReasonBinaryUnsupported answers a binary push to a handler that does
	// not implement BinaryHandler.
	ReasonBinaryUnsupported = "binary payload not supported"
)

// CloseCode is a WebSocket close status code sent by the server. The server
// never closes with 1000: phoenix.js 1.8.0-1.8.15 does not reconnect after it
// (docs/PHOENIX.md §4.6).
type CloseCode int

// Close codes the server uses, with the reason text sent in the close frame.
// The client reconnects after every one of them.
const (
	// CloseGoingAway (1001, "going away" / "idle timeout"): forced
	// disconnect (Endpoint.Disconnect) and the idle timeout (nothing received
	// for HeartbeatTimeout). Source: docs/PHOENIX.md §3.8, websocket.ex.
	CloseGoingAway CloseCode = 1001
	// CloseUnsupportedData (1003, "binary frame on V1"): a binary frame on a
	// V1 (JSON object) socket.
	CloseUnsupportedData CloseCode = 1003
	// CloseMalformed (1007, "malformed frame"): a frame that does not decode,
	// or a text frame (or binary header field) that is not valid UTF-8.
	// Phoenix crashes the connection process here; we close it cleanly. The
	// frame is counted in Stats.BadFrames.
	CloseMalformed CloseCode = 1007
	// CloseTooBig (1009, "frame too big"): an inbound frame larger than
	// MaxFrameBytes. Sent by the WebSocket library's read limit.
	CloseTooBig CloseCode = 1009
	// CloseInternal (1011, "internal error"): an outbound frame could not be
	// encoded.
	CloseInternal CloseCode = 1011
	// CloseRestart (1012, "restart"): Endpoint.Shutdown (drain). Phoenix uses
	// the same code for a graceful shutdown.
	CloseRestart CloseCode = 1012
	// CloseSlowConsumer (1013, "slow consumer"): the socket's outbound queue
	// overflowed (QueueSize frames or QueueBytes bytes). Counted in
	// Stats.SlowConsumers.
	CloseSlowConsumer CloseCode = 1013
)

var closeReasons = map[CloseCode]string{
	CloseGoingAway:       "going away",
	CloseUnsupportedData: "binary frame on V1",
	CloseMalformed:       "malformed frame",
	CloseTooBig:          "frame too big",
	CloseInternal:        "internal error",
	CloseRestart:         "restart",
	CloseSlowConsumer:    "slow consumer",
}

// String returns the default reason text of c.
func (c CloseCode) String() string {
	if r, ok := closeReasons[c]; ok {
		return r
	}
	return fmt.Sprintf("close %d", int(c))
}

// CloseCodeTable renders the close codes as a Markdown table, for docs.
func CloseCodeTable() string {
	codes := make([]int, 0, len(closeReasons))
	for c := range closeReasons {
		codes = append(codes, int(c))
	}
	sort.Ints(codes)
	var b strings.Builder
	b.WriteString("| code | reason |\n|---|---|\n")
	for _, c := range codes {
		fmt.Fprintf(&b, "| %d | %s |\n", c, closeReasons[CloseCode(c)])
	}
	return b.String()
}

// CloseReason says why a channel ended; Handler.Terminate receives it.
type CloseReason string

// Channel close reasons.
const (
	// ReasonLeave: the client sent phx_leave.
	ReasonLeave CloseReason = "leave"
	// ReasonDuplicateJoin: the client joined the same topic again; the old
	// channel is replaced (docs/PHOENIX.md §3.3).
	ReasonDuplicateJoin CloseReason = "duplicate_join"
	// ReasonServerClose: the server closed the channel (Channel.Close).
	ReasonServerClose CloseReason = "closed"
	// ReasonCrash: HandleIn panicked.
	ReasonCrash CloseReason = "crash"
	// ReasonSocketClosed: the socket went away (client close, idle timeout,
	// disconnect, slow consumer, shutdown, transport error).
	ReasonSocketClosed CloseReason = "socket_closed"
)

// ReplyError refuses a join or answers a push with an error reply:
// {"status":"error","response":{"reason":Reason, <Fields...>}}. A "reason"
// key in Fields is overridden by Reason.
type ReplyError struct {
	Reason string
	Fields map[string]any
}

// Error implements error.
func (e *ReplyError) Error() string { return "channels: reply error: " + e.Reason }

// response returns the reply's response object.
func (e *ReplyError) response() map[string]any {
	m := make(map[string]any, len(e.Fields)+1)
	for k, v := range e.Fields {
		m[k] = v
	}
	m["reason"] = e.Reason
	return m
}
