package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The input contract: limits on an accepted Input that every store can hold
// and read back equal (README "Input contract"). An input the contract
// refuses is refused before anything is logged or run; one it accepts can be
// checkpointed by the memory and Postgres stores, appended to the replay
// log and decoded by an agent with encoding/json.
const (
	// MaxInputDepth is the deepest nesting of objects and arrays in an
	// input's data, the data object itself being level 1. Stores wrap data
	// a few levels deeper (the checkpoint's pending list, the event
	// envelope), far below encoding/json's 10,000-level limit and Postgres'
	// stack limit.
	MaxInputDepth = 64
	// MaxNumberLen is the longest number literal in an input's data, in
	// bytes. With MaxExponent it keeps every number inside what Postgres'
	// numeric (jsonb) holds: at most 131,072 digits before the point and
	// 16,383 after it.
	MaxNumberLen = 100
	// MaxExponent bounds the magnitude of a number literal's exponent
	// (1e999, 0e-999). A zero with a larger negative exponent fits a
	// float64 but overflows numeric.
	MaxExponent = 999
)

// Rules of the input contract, as InputError.Rule names them.
const (
	RuleDepth     = "depth"     // data nests deeper than MaxInputDepth
	RuleSurrogate = "surrogate" // a \uD800–\uDFFF escape that is not half of a pair
	RuleNumber    = "number"    // a number too long, with too large an exponent, or beyond float64
	RuleNUL       = "nul"       // U+0000 in a string (a \u0000 escape in data)
	RuleJSON      = "json"      // data is not valid UTF-8 JSON
	RuleMultitask = "multitask" // multitask is not a double-texting mode
	RuleResume    = "resume"    // a resume input's data is not {"interrupt","value"}
)

// InputError is an input the contract refuses. Rule is one of the Rule
// constants; the message names the rule and the offending value, and is
// meant for the poster (the gateway answers 422 invalid_input with it).
type InputError struct {
	Rule   string
	Detail string
}

func (e *InputError) Error() string { return "input rule " + e.Rule + ": " + e.Detail }

// ErrInvalidInput is matched by every *InputError (errors.Is).
var ErrInvalidInput = errors.New("session: input refused by the input contract")

// Is makes errors.Is(err, ErrInvalidInput) true for an *InputError.
func (e *InputError) Is(target error) bool { return target == ErrInvalidInput }

func refuse(rule, format string, a ...any) error {
	return &InputError{Rule: rule, Detail: fmt.Sprintf(format, a...)}
}

// ValidateInput checks in against the input contract and returns nil or an
// *InputError:
//
//   - type and idempotency_key hold no U+0000 (RuleNUL);
//   - data, when present, is valid UTF-8 JSON (RuleJSON) nesting at most
//     MaxInputDepth levels (RuleDepth);
//   - no string of data (keys included) has a \u0000 escape (RuleNUL): jsonb
//     refuses U+0000 in text;
//   - every \uD800–\uDBFF escape is directly followed by a \uDC00–\uDFFF
//     escape, and no low surrogate escape stands alone (RuleSurrogate):
//     jsonb refuses an unpaired surrogate;
//   - every number is at most MaxNumberLen bytes, has an exponent of at most
//     MaxExponent in magnitude and is finite as a float64 (RuleNumber):
//     jsonb's numeric overflows beyond the first two, and an agent decoding
//     data with encoding/json fails on a number beyond float64, turn after
//     turn.
func ValidateInput(in Input) error {
	if strings.IndexByte(in.Type, 0) >= 0 {
		return refuse(RuleNUL, "type holds U+0000")
	}
	if strings.IndexByte(in.IdempotencyKey, 0) >= 0 {
		return refuse(RuleNUL, "idempotency_key holds U+0000")
	}
	if len(in.Data) == 0 {
		return nil
	}
	if !utf8.Valid(in.Data) || !json.Valid(in.Data) {
		return refuse(RuleJSON, "data is not valid UTF-8 JSON")
	}
	return checkData(in.Data)
}

// checkData applies the depth, string and number rules to the valid JSON
// text b. Outside strings only structure, literals and numbers occur, so a
// byte-level walk that skips strings whole sees every bracket and number.
func checkData(b []byte) error {
	depth := 0
	for i := 0; i < len(b); {
		switch c := b[i]; {
		case c == '{' || c == '[':
			depth++
			if depth > MaxInputDepth {
				return refuse(RuleDepth, "data nests deeper than %d levels", MaxInputDepth)
			}
			i++
		case c == '}' || c == ']':
			depth--
			i++
		case c == '"':
			n, err := checkString(b[i:])
			if err != nil {
				return err
			}
			i += n
		case c == '-' || (c >= '0' && c <= '9'):
			j := i + 1
			for j < len(b) && isNumberByte(b[j]) {
				j++
			}
			if err := checkNumber(b[i:j]); err != nil {
				return err
			}
			i = j
		default: // whitespace, ',', ':', true, false, null
			i++
		}
	}
	return nil
}

func isNumberByte(c byte) bool {
	return (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}

// checkString checks the string token at the start of s (its opening quote)
// and returns its length in bytes.
func checkString(s []byte) (int, error) {
	for i := 1; i < len(s); {
		switch s[i] {
		case '"':
			return i + 1, nil
		case '\\':
			if s[i+1] != 'u' {
				i += 2
				continue
			}
			u := hex4(s[i+2 : i+6])
			switch {
			case u == 0:
				return 0, refuse(RuleNUL, "a string in data holds \\u0000")
			case u >= 0xD800 && u <= 0xDBFF:
				if i+12 > len(s) || s[i+6] != '\\' || s[i+7] != 'u' {
					return 0, refuse(RuleSurrogate, "\\u%04x in data is not followed by a low surrogate escape", u)
				}
				if lo := hex4(s[i+8 : i+12]); lo < 0xDC00 || lo > 0xDFFF {
					return 0, refuse(RuleSurrogate, "\\u%04x in data is not followed by a low surrogate escape", u)
				}
				i += 12
			case u >= 0xDC00 && u <= 0xDFFF:
				return 0, refuse(RuleSurrogate, "\\u%04x in data is a low surrogate without a high one", u)
			default:
				i += 6
			}
		default:
			i++
		}
	}
	return len(s), nil // unreachable for valid JSON
}

// hex4 decodes four hex digits (valid JSON guarantees them).
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		default:
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// checkNumber applies the number rule to one valid JSON number literal.
func checkNumber(tok []byte) error {
	if len(tok) > MaxNumberLen {
		return refuse(RuleNumber, "a number in data is %d characters long; at most %d are accepted", len(tok), MaxNumberLen)
	}
	if k := strings.IndexAny(string(tok), "eE"); k >= 0 {
		exp := strings.TrimLeft(strings.TrimLeft(string(tok[k+1:]), "+-"), "0")
		if e, err := strconv.Atoi(exp); exp != "" && (err != nil || e > MaxExponent) {
			return refuse(RuleNumber, "the number %s in data has an exponent beyond ±%d", tok, MaxExponent)
		}
	}
	if f, err := strconv.ParseFloat(string(tok), 64); err != nil || math.IsInf(f, 0) {
		return refuse(RuleNumber, "the number %s in data is beyond the float64 range (±%g)", tok, math.MaxFloat64)
	}
	return nil
}

// StorableOutput wraps an agent so that everything it emits and replies can
// be stored, like accepted input (a failed end-of-turn checkpoint would stand
// the session down, and the accepted turn with it):
//
//   - U+0000 in the reply's role or content, or in a string of emitted data,
//     becomes U+FFFD (jsonb refuses U+0000 in text; Go strings cannot hold an
//     unpaired surrogate, so U+0000 is the one such character encoding/json
//     produces);
//   - emitted data that breaks the depth, surrogate or number rule (only
//     json.RawMessage or json.Number can) is refused at emit with the
//     *InputError, which the agent sees as emit's error.
//
// A nil agent stays nil; wrapping twice wraps once.
func StorableOutput(a Agent) Agent {
	if a == nil {
		return nil
	}
	if _, ok := a.(storableAgent); ok {
		return a
	}
	return storableAgent{a}
}

type storableAgent struct{ Agent }

func (s storableAgent) Run(ctx context.Context, turn Turn, emit Emit) (Message, error) {
	msg, err := s.Agent.Run(ctx, turn, func(ctx context.Context, typ string, data any) error {
		raw, merr := json.Marshal(data)
		if merr != nil {
			return emit(ctx, typ, data) // the actor's emit reports it
		}
		raw = replaceNULEscapes(raw)
		if cerr := checkData(raw); cerr != nil {
			return fmt.Errorf("session: emit %q: %w", typ, cerr)
		}
		return emit(ctx, typ, json.RawMessage(raw))
	})
	msg.Role = replaceNUL(msg.Role)
	msg.Content = replaceNUL(msg.Content)
	return msg, err
}

func replaceNUL(s string) string {
	if strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

// replaceNULEscapes rewrites every \u0000 escape of the valid JSON text b as
// \ufffd, in place. Backslashes occur only inside strings, each starting an
// escape, so stepping over every escape's second byte finds exactly the
// escapes (an escaped backslash followed by the text u0000 is left alone).
func replaceNULEscapes(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u0000`)) {
		return b
	}
	for i := 0; i+1 < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) && string(b[i+2:i+6]) == "0000" {
			copy(b[i+2:i+6], "fffd")
		}
		i++ // the escaped byte
	}
	return b
}
