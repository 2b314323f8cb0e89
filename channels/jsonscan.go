package channels

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// maxJSONDepth bounds nesting in inbound JSON so a hostile frame cannot blow
// the stack.
const maxJSONDepth = 512

// scanner is a minimal validating JSON reader over one frame. It never
// panics: every index is bounds-checked and every error is ErrMalformed.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) errf(format string, a ...any) error {
	return fmt.Errorf("%w: %s at byte %d", ErrMalformed, fmt.Sprintf(format, a...), s.i)
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// expect skips whitespace and consumes c.
func (s *scanner) expect(c byte) error {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != c {
		return s.errf("expected %q", c)
	}
	s.i++
	return nil
}

// peek skips whitespace and returns the next byte (0 at the end).
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// value skips one JSON value and returns its bytes.
func (s *scanner) value(depth int) ([]byte, error) {
	s.ws()
	start := s.i
	if err := s.skip(depth); err != nil {
		return nil, err
	}
	return s.b[start:s.i], nil
}

func (s *scanner) skip(depth int) error {
	if depth > maxJSONDepth {
		return s.errf("nesting deeper than %d", maxJSONDepth)
	}
	switch c := s.peek(); {
	case c == '{':
		s.i++
		if s.peek() == '}' {
			s.i++
			return nil
		}
		for {
			if s.peek() != '"' {
				return s.errf("expected object key")
			}
			if _, _, err := s.str(); err != nil {
				return err
			}
			if err := s.expect(':'); err != nil {
				return err
			}
			if err := s.skip(depth + 1); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.i++
			case '}':
				s.i++
				return nil
			default:
				return s.errf("expected ',' or '}'")
			}
		}
	case c == '[':
		s.i++
		if s.peek() == ']' {
			s.i++
			return nil
		}
		for {
			if err := s.skip(depth + 1); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.i++
			case ']':
				s.i++
				return nil
			default:
				return s.errf("expected ',' or ']'")
			}
		}
	case c == '"':
		_, _, err := s.str()
		return err
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	default:
		return s.errf("unexpected byte %q", c)
	}
}

func (s *scanner) lit(l string) error {
	if len(s.b)-s.i < len(l) || string(s.b[s.i:s.i+len(l)]) != l {
		return s.errf("expected %s", l)
	}
	s.i += len(l)
	return nil
}

func (s *scanner) digits() int {
	n := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

func (s *scanner) number() error {
	if s.b[s.i] == '-' {
		s.i++
	}
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
	} else if s.digits() == 0 {
		return s.errf("bad number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return s.errf("bad fraction")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return s.errf("bad exponent")
		}
	}
	return nil
}

// str consumes a JSON string (the cursor is on its opening quote) and
// returns the raw token including quotes and whether it has escapes.
func (s *scanner) str() (tok []byte, escaped bool, err error) {
	start := s.i
	s.i++
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.b[start:s.i], escaped, nil
		case c == '\\':
			escaped = true
			s.i++
			if s.i >= len(s.b) {
				return nil, false, s.errf("truncated escape")
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				s.i++
				if len(s.b)-s.i < 4 {
					return nil, false, s.errf("truncated \\u escape")
				}
				for k := 0; k < 4; k++ {
					if !isHex(s.b[s.i+k]) {
						return nil, false, s.errf("bad \\u escape")
					}
				}
				s.i += 4
			default:
				return nil, false, s.errf("bad escape")
			}
		case c < 0x20:
			return nil, false, s.errf("control character in string")
		default:
			s.i++
		}
	}
	return nil, false, s.errf("unterminated string")
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// stringValue reads a JSON string and returns its Go value.
func (s *scanner) stringValue(what string) (string, error) {
	if s.peek() != '"' {
		return "", s.errf("%s must be a string", what)
	}
	tok, esc, err := s.str()
	if err != nil {
		return "", err
	}
	return unquote(tok, esc)
}

// unquote returns the value of a JSON string token. Invalid UTF-8 becomes
// U+FFFD per byte, as encoding/json does.
func unquote(tok []byte, escaped bool) (string, error) {
	if !escaped && utf8.Valid(tok) {
		return string(tok[1 : len(tok)-1]), nil
	}
	var v string
	if err := json.Unmarshal(tok, &v); err != nil {
		return "", fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return v, nil
}

// ref reads a ref: a string, a number or null.
func (s *scanner) ref(what string) (Ref, error) {
	switch c := s.peek(); {
	case c == 'n':
		if err := s.lit("null"); err != nil {
			return Ref{}, err
		}
		return Ref{}, nil
	case c == '"':
		tok, _, err := s.str()
		if err != nil {
			return Ref{}, err
		}
		return Ref{raw: string(tok)}, nil
	case c == '-' || (c >= '0' && c <= '9'):
		start := s.i
		if err := s.number(); err != nil {
			return Ref{}, err
		}
		return Ref{raw: string(s.b[start:s.i])}, nil
	default:
		return Ref{}, s.errf("%s must be a string, number or null", what)
	}
}

// end checks that only whitespace remains.
func (s *scanner) end() error {
	s.ws()
	if s.i != len(s.b) {
		return s.errf("trailing data")
	}
	return nil
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. It escapes '"', '\\' and
// control characters and replaces invalid UTF-8 with U+FFFD, as
// encoding/json does; it does not HTML-escape.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
