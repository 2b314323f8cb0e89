package channels

import "encoding/json"

// Ref is an opaque client reference (a ref or a join_ref). It keeps the raw
// JSON token the client sent (a string or, leniently, a number) so it is echoed
// byte-for-byte; the zero value is null. phoenix.js sends decimal strings
// ("3"); the server never renumbers them (docs/PHOENIX.md §2.1, §7).
type Ref struct {
	raw string // JSON token; "" means null
}

// StringRef returns the Ref whose value is the JSON string s.
func StringRef(s string) Ref {
	if s == "" {
		return Ref{raw: `""`}
	}
	return Ref{raw: string(appendJSONString(make([]byte, 0, len(s)+2), s))}
}

// IsNull reports whether r is JSON null.
func (r Ref) IsNull() bool { return r.raw == "" }

// Raw returns r's JSON token ("null" for null).
func (r Ref) Raw() string {
	if r.raw == "" {
		return "null"
	}
	return r.raw
}

// String returns r's value: the unquoted string, the number's digits, or ""
// for null.
func (r Ref) String() string {
	if r.raw == "" {
		return ""
	}
	if r.raw[0] != '"' {
		return r.raw
	}
	if !hasByte(r.raw, '\\') {
		return r.raw[1 : len(r.raw)-1]
	}
	var s string
	if err := json.Unmarshal([]byte(r.raw), &s); err != nil {
		return r.raw
	}
	return s
}

// Equal reports whether r and o carry the same value.
func (r Ref) Equal(o Ref) bool {
	if r.raw == o.raw {
		return true
	}
	if r.IsNull() || o.IsNull() {
		return false
	}
	return r.String() == o.String()
}

func (r Ref) appendJSON(dst []byte) []byte {
	if r.raw == "" {
		return append(dst, "null"...)
	}
	return append(dst, r.raw...)
}

func hasByte(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return true
		}
	}
	return false
}
