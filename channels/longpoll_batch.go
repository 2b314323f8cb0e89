package channels

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
)

// LongPollMaxBatch is the most frames one LongPoll POST may carry: the
// client's own MAX_LONGPOLL_BATCH_SIZE (phoenix.js 1.8 splits larger
// batches into several POSTs). docs/PHOENIX.md §6.3.
const LongPollMaxBatch = 100

// Batch decode errors. A POST whose batch fails to decode is refused whole
// (nothing of it is dispatched): ErrBatchMalformed and ErrBatchTooLarge are
// answered 400, ErrFrameTooBig 413.
var (
	// ErrBatchMalformed: the batch is empty, holds more than
	// LongPollMaxBatch frames, or a binary line is not standard base64.
	ErrBatchMalformed = errors.New("channels: malformed longpoll batch")
	// ErrFrameTooBig: a frame of the batch is over MaxFrameBytes (after
	// base64 decoding).
	ErrFrameTooBig = errors.New("channels: longpoll frame over the frame limit")
)

// decodeLongPollBatch splits the body of a LongPoll POST into inbound frames
// (docs/PHOENIX.md §6.3). With ndjson true (Content-Type
// application/x-ndjson, what phoenix.js 1.7+ sends) the body is one frame
// per line: lines end at "\n", a "\r" before it is dropped, empty lines are
// skipped; a line starting with '[' (V2) or '{' (V1) is a text frame, any
// other line is a binary frame in standard, padded base64 (the client's
// btoa). Otherwise the whole body is one text frame, as older clients post
// it. Each frame is at most maxFrame bytes (ErrFrameTooBig); an empty batch,
// more than LongPollMaxBatch frames or bad base64 is ErrBatchMalformed.
// The frames' Data alias body for text frames.
func decodeLongPollBatch(body []byte, ndjson bool, maxFrame int64) ([]Frame, error) {
	if !ndjson {
		if len(body) == 0 {
			return nil, fmt.Errorf("%w: empty body", ErrBatchMalformed)
		}
		if int64(len(body)) > maxFrame {
			return nil, fmt.Errorf("%w: %d bytes", ErrFrameTooBig, len(body))
		}
		return []Frame{{Data: body}}, nil
	}
	var frames []Frame
	for line := 0; len(body) > 0; line++ {
		var l []byte
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			l, body = body[:i], body[i+1:]
		} else {
			l, body = body, nil
		}
		l = bytes.TrimSuffix(l, []byte{'\r'})
		if len(l) == 0 {
			continue
		}
		if len(frames) == LongPollMaxBatch {
			return nil, fmt.Errorf("%w: more than %d frames", ErrBatchMalformed, LongPollMaxBatch)
		}
		if l[0] == '[' || l[0] == '{' {
			if int64(len(l)) > maxFrame {
				return nil, fmt.Errorf("%w: line %d: %d bytes", ErrFrameTooBig, line+1, len(l))
			}
			frames = append(frames, Frame{Data: l})
			continue
		}
		if int64(base64.StdEncoding.DecodedLen(len(l))) > maxFrame+2 {
			return nil, fmt.Errorf("%w: line %d: %d base64 bytes", ErrFrameTooBig, line+1, len(l))
		}
		b := make([]byte, base64.StdEncoding.DecodedLen(len(l)))
		n, err := base64.StdEncoding.Strict().Decode(b, l)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d is neither a JSON frame nor base64: %v", ErrBatchMalformed, line+1, err)
		}
		if int64(n) > maxFrame {
			return nil, fmt.Errorf("%w: line %d: %d bytes", ErrFrameTooBig, line+1, n)
		}
		if n == 0 {
			return nil, fmt.Errorf("%w: line %d: empty binary frame", ErrBatchMalformed, line+1)
		}
		frames = append(frames, Frame{Data: b[:n:n], Binary: true})
	}
	if len(frames) == 0 {
		return nil, fmt.Errorf("%w: no frames", ErrBatchMalformed)
	}
	return frames, nil
}

// encodeLongPollBatch is the inverse of decodeLongPollBatch with ndjson:
// text frames as lines, binary frames as base64 lines, joined by "\n" (what
// phoenix.js sends). A text frame must start with '[' or '{' and hold no
// "\n"; a binary frame must not be empty.
func encodeLongPollBatch(frames []Frame) []byte {
	var b []byte
	for i, f := range frames {
		if i > 0 {
			b = append(b, '\n')
		}
		if f.Binary {
			b = base64.StdEncoding.AppendEncode(b, f.Data)
		} else {
			b = append(b, f.Data...)
		}
	}
	return b
}
