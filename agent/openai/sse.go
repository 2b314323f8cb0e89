package openai

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// sseEvent is one Server-Sent Event: its name (the "event" field, "" when
// absent) and its data (the "data" lines joined by "\n").
type sseEvent struct {
	name string
	data []byte
}

// errLineTooLong is returned by sseReader.next for a line over its bound.
var errLineTooLong = errors.New("line too long")

// sseReader reads the text/event-stream format (the WHATWG "Server-sent
// events" parsing rules, minus lone-CR line ends, which no chat completions
// server sends): lines end in "\n" or "\r\n"; a blank line ends an event;
// a line starting with ":" is a comment (keep-alives); "field: value" sets
// a field, one space after the colon being dropped; "data" lines
// accumulate; "event" names the event; "id" and "retry" are ignored. One
// extension: an "error" field (llama.cpp's server once sent errors as
// "error: {…}" lines) is read as an event named "error" with that data.
//
// Lines are bounded by max bytes. At EOF an event whose blank line never
// came is still returned (a server that closes right after "data: [DONE]"
// has finished), then io.EOF.
type sseReader struct {
	r    *bufio.Reader
	max  int
	line []byte
	eof  bool
}

func newSSEReader(r io.Reader, max int) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 16<<10), max: max}
}

// readLine returns the next line without its line end. At the end of the
// input it returns the last unterminated line, if any, then io.EOF. Read
// errors other than io.EOF are returned as they are.
func (s *sseReader) readLine() ([]byte, error) {
	if s.eof {
		return nil, io.EOF
	}
	s.line = s.line[:0]
	for {
		frag, err := s.r.ReadSlice('\n')
		if len(s.line)+len(frag) > s.max+2 { // +2: the line end
			return nil, fmt.Errorf("%w: over %d bytes", errLineTooLong, s.max)
		}
		s.line = append(s.line, frag...)
		switch {
		case err == nil:
			line := bytes.TrimSuffix(s.line[:len(s.line)-1], []byte("\r"))
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			s.eof = true
			if len(s.line) == 0 {
				return nil, io.EOF
			}
			return bytes.TrimSuffix(s.line, []byte("\r")), nil
		default:
			return nil, err
		}
	}
}

// next returns the next event with data or a name. Its data is valid
// until the following call.
func (s *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	var data []byte
	has := false
	for {
		line, err := s.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) && has {
				ev.data = data
				return ev, nil
			}
			return sseEvent{}, err
		}
		if len(line) == 0 {
			if has {
				ev.data = data
				return ev, nil
			}
			ev = sseEvent{}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, found := bytes.Cut(line, []byte(":"))
		if found && len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		switch string(field) {
		case "data":
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, value...)
			if data == nil {
				data = []byte{}
			}
			has = true
		case "event":
			ev.name = string(value)
			has = true
		case "error":
			ev.name = "error"
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, value...)
			if data == nil {
				data = []byte{}
			}
			has = true
		}
		if len(data) > s.max {
			return sseEvent{}, fmt.Errorf("%w: event data over %d bytes", errLineTooLong, s.max)
		}
	}
}
