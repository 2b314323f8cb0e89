package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
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
var ErrInvalidInput = errors.New("agent: input refused by the input contract")

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
	return ValidateData(in.Data)
}

// ValidateData applies the input contract's depth, string and number
// rules (RuleDepth, RuleNUL, RuleSurrogate, RuleNumber) to b, which must
// already be valid JSON text (json.Valid), and returns nil or an
// *InputError. session.StorableOutput checks what an agent emits with it.
// Outside strings only structure, literals and numbers occur, so a
// byte-level walk that skips strings whole sees every bracket and number.
func ValidateData(b []byte) error {
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

// InputText is the text of an input as the history and the agents see it:
// data.text when data is an object with a string "text", the string itself
// when data is a JSON string, else the raw JSON of data ("" without data).
func InputText(in Input) string {
	raw := bytes.TrimSpace(in.Data)
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '{':
		var obj struct {
			Text *string `json:"text"`
		}
		if json.Unmarshal(raw, &obj) == nil && obj.Text != nil {
			return *obj.Text
		}
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	return string(raw)
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// ValidID reports whether id is a valid session id (or interrupt id, the
// same form): 1–128 characters of
// [A-Za-z0-9_.:-] (docs/OWNERSHIP.md "Wire contracts").
func ValidID(id string) bool { return idPattern.MatchString(id) }
