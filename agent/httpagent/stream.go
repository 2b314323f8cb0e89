package httpagent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// frame is one unit read from an agent's response stream: the payload of one
// SSE event (its data lines joined with "\n") with the SSE event name, or one
// NDJSON line (Event empty).
type frame struct {
	Event string
	Data  []byte
}

// errFrameTooLarge is wrapped by a reader's error when one frame (an SSE
// event's data, an NDJSON line) exceeds the event bound.
var errFrameTooLarge = errors.New("event exceeds the event size bound")

// frameReader reads the frames of one response body. next returns io.EOF at
// the end of the stream; any other error is a broken or invalid stream.
type frameReader interface {
	next() (frame, error)
}

// sseReader reads text/event-stream (the WHATWG HTML "server-sent events"
// parsing rules): lines end with "\n", "\r\n" or "\r"; "field: value" lines
// with one optional space after the colon; "data" lines joined with "\n";
// "event" names the event; a line starting with ":" is a comment; "id" and
// "retry" are read and ignored; a blank line dispatches the event if it has
// data. An event cut off by the end of the stream is not dispatched. max
// bounds one event's data in bytes and one line in bytes (plus the longest
// field name and its colon and space).
type sseReader struct {
	r    *bufio.Reader
	max  int
	line []byte
}

func newSSEReader(r io.Reader, max int) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 16<<10), max: max}
}

// readLine returns the next line without its terminator; io.EOF when the
// stream ends, with the unterminated rest (if any) returned as a final line
// together with io.EOF.
func (s *sseReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		b, err := s.r.ReadByte()
		if err != nil {
			return s.line, err
		}
		switch b {
		case '\n':
			return s.line, nil
		case '\r':
			if nb, err := s.r.Peek(1); err == nil && nb[0] == '\n' {
				s.r.ReadByte() //nolint:errcheck // peeked
			}
			return s.line, nil
		}
		if len(s.line) >= s.max+len("event: ") {
			return nil, fmt.Errorf("httpagent: an SSE line is longer than %d bytes: %w", s.max, errFrameTooLarge)
		}
		s.line = append(s.line, b)
	}
}

func (s *sseReader) next() (frame, error) {
	var (
		f       frame
		data    []byte
		hasData bool
	)
	for {
		line, err := s.readLine()
		if err != nil {
			if err == io.EOF {
				return frame{}, io.EOF // an unterminated event is not dispatched
			}
			return frame{}, err
		}
		if len(line) == 0 {
			if !hasData {
				f = frame{} // an event without data is not dispatched
				continue
			}
			f.Data = data
			return f, nil
		}
		if line[0] == ':' {
			continue // comment, used as keep-alive
		}
		name, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			name, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(name) {
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
			if len(data) > s.max {
				return frame{}, fmt.Errorf("httpagent: an SSE event's data is longer than %d bytes: %w", s.max, errFrameTooLarge)
			}
		case "event":
			f.Event = string(value)
		}
		// id, retry and unknown fields are ignored.
	}
}

// ndjsonReader reads newline-delimited JSON: one value per "\n"-terminated
// line ("\r\n" accepted), blank lines skipped, a last line without a newline
// accepted. max bounds one line in bytes.
type ndjsonReader struct {
	r   *bufio.Reader
	max int
}

func newNDJSONReader(r io.Reader, max int) *ndjsonReader {
	return &ndjsonReader{r: bufio.NewReaderSize(r, 16<<10), max: max}
}

func (n *ndjsonReader) next() (frame, error) {
	var line []byte
	for {
		chunk, err := n.r.ReadSlice('\n')
		if len(line)+len(chunk) > n.max+2 { // +2: the "\r\n" terminator
			return frame{}, fmt.Errorf("httpagent: an NDJSON line is longer than %d bytes: %w", n.max, errFrameTooLarge)
		}
		line = append(line, chunk...)
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err != nil && err != io.EOF:
			return frame{}, err
		}
		trimmed := bytes.TrimSpace(line)
		if len(trimmed) > 0 {
			if len(trimmed) > n.max {
				return frame{}, fmt.Errorf("httpagent: an NDJSON line is longer than %d bytes: %w", n.max, errFrameTooLarge)
			}
			return frame{Data: trimmed}, nil
		}
		if err == io.EOF {
			return frame{}, io.EOF
		}
		line = line[:0]
	}
}
