package channels

import (
	"encoding/binary"
	"sync/atomic"
)

// wireCache holds the server WebSocket frame of one broadcast frame, built
// on first use and then shared read-only by every socket the frame was
// queued to. Frames stay transport-neutral (Frame.Data is the payload);
// framing is the WebSocket transport's business, done at most once per
// serializer per broadcast instead of once per socket.
type wireCache struct {
	b atomic.Pointer[[]byte]
}

// wsBytes returns f framed as one unmasked, unfragmented server WebSocket
// frame (RFC 6455 §5.2). For a frame with a wireCache the bytes are built
// once and shared: callers must not modify them. Without one it allocates.
func (f *Frame) wsBytes() []byte {
	c := f.wire
	if c == nil {
		return appendWSFrame(nil, f)
	}
	if p := c.b.Load(); p != nil {
		return *p
	}
	b := appendWSFrame(make([]byte, 0, wsHeaderLen(len(f.Data))+len(f.Data)), f)
	if !c.b.CompareAndSwap(nil, &b) {
		return *c.b.Load() // another socket built the same bytes first
	}
	return b
}

// wsHeaderLen is the length of a server frame header for n payload bytes.
func wsHeaderLen(n int) int {
	switch {
	case n <= 125:
		return 2
	case n <= 0xFFFF:
		return 4
	default:
		return 10
	}
}

// appendWSFrame appends f as one server frame: FIN set, opcode text (1) or
// binary (2), no mask, the shortest length encoding, then Data.
func appendWSFrame(dst []byte, f *Frame) []byte {
	if p := f.wire; p != nil {
		if b := p.b.Load(); b != nil {
			return append(dst, *b...)
		}
	}
	op := byte(0x81)
	if f.Binary {
		op = 0x82
	}
	n := len(f.Data)
	switch {
	case n <= 125:
		dst = append(dst, op, byte(n))
	case n <= 0xFFFF:
		dst = append(dst, op, 126, byte(n>>8), byte(n))
	default:
		dst = append(dst, op, 127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	return append(dst, f.Data...)
}
