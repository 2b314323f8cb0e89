package channels

import "sync/atomic"

// Stats is a snapshot of an Endpoint's counters. Gauges: SocketsOpen,
// ChannelsOpen. Everything else counts up from the Endpoint's start.
type Stats struct {
	SocketsOpen   int64  // sockets currently attached
	Sockets       uint64 // sockets ever attached
	ChannelsOpen  int64  // channels currently joined
	Joins         uint64 // successful joins
	JoinsRefused  uint64 // joins answered with an error reply
	FramesIn      uint64 // inbound frames
	FramesOut     uint64 // outbound frames written to transports
	Writes        uint64 // WebSocket data writes (one per batch of frames; FramesOut/Writes is the batching)
	WritesParked  uint64 // WebSocket data writes the kernel did not take whole, finished by a goroutine of their own
	BadFrames     uint64 // inbound frames that failed to decode (socket closed with 1007/1003)
	SlowConsumers uint64 // sockets closed with 1013 because their queue overflowed
	QueueDrops    uint64 // frames dropped because their socket was closing or overflowing
}

type counters struct {
	socketsOpen   atomic.Int64
	sockets       atomic.Uint64
	channelsOpen  atomic.Int64
	joins         atomic.Uint64
	joinsRefused  atomic.Uint64
	framesIn      atomic.Uint64
	framesOut     atomic.Uint64
	writes        atomic.Uint64
	writesParked  atomic.Uint64
	badFrames     atomic.Uint64
	slowConsumers atomic.Uint64
	queueDrops    atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		SocketsOpen:   c.socketsOpen.Load(),
		Sockets:       c.sockets.Load(),
		ChannelsOpen:  c.channelsOpen.Load(),
		Joins:         c.joins.Load(),
		JoinsRefused:  c.joinsRefused.Load(),
		FramesIn:      c.framesIn.Load(),
		FramesOut:     c.framesOut.Load(),
		Writes:        c.writes.Load(),
		WritesParked:  c.writesParked.Load(),
		BadFrames:     c.badFrames.Load(),
		SlowConsumers: c.slowConsumers.Load(),
		QueueDrops:    c.queueDrops.Load(),
	}
}
