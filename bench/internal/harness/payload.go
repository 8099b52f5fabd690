package harness

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// PayloadSize is the size in bytes of every job's payload in the
// benchmark: small enough to be a "no-op" job, large enough to carry the
// job's sequence number and the instant its enqueue call began.
const PayloadSize = 50

// ErrBadPayload is returned by ParsePayload for bytes that are not a payload
// made by Payload.Marshal.
var ErrBadPayload = errors.New("harness: bad payload")

// Payload is what every job carries, the same for every system.
type Payload struct {
	// ID is the job's sequence number within one run, from 0.
	ID int64 `json:"i"`
	// EnqueuedAt is when the enqueue call began, in Unix nanoseconds; the
	// enqueue-to-start latency is measured from it.
	EnqueuedAt int64 `json:"t"`
	// Pad fills the JSON up to PayloadSize bytes.
	Pad string `json:"p"`
}

// Padded returns p with Pad set so that its JSON is PayloadSize bytes long
// (or as short as possible when the numbers alone exceed it).
func (p Payload) Padded() Payload {
	p.Pad = ""
	base := len(`{"i":,"t":,"p":""}`) + len(strconv.FormatInt(p.ID, 10)) + len(strconv.FormatInt(p.EnqueuedAt, 10))
	if n := PayloadSize - base; n > 0 {
		p.Pad = strings.Repeat("x", n)
	}
	return p
}

// Marshal returns the payload's JSON encoding, padded to PayloadSize bytes.
func (p Payload) Marshal() []byte {
	p = p.Padded()
	b := make([]byte, 0, PayloadSize)
	b = append(b, `{"i":`...)
	b = strconv.AppendInt(b, p.ID, 10)
	b = append(b, `,"t":`...)
	b = strconv.AppendInt(b, p.EnqueuedAt, 10)
	b = append(b, `,"p":"`...)
	b = append(b, p.Pad...)
	b = append(b, `"}`...)
	return b
}

// ParsePayload decodes bytes made by Marshal (any JSON object with the
// fields "i" and "t" is accepted). Marshal's own layout is parsed without
// encoding/json, which would otherwise be a tenth of the harness's CPU in
// the fastest runs.
func ParsePayload(b []byte) (Payload, error) {
	if p, ok := parseExact(b); ok {
		return p, nil
	}
	return parseJSON(b)
}

// parseExact parses exactly Marshal's layout, {"i":N,"t":N,"p":"x..."},
// and reports false for anything else.
func parseExact(b []byte) (Payload, bool) {
	rest, ok := bytes.CutPrefix(b, []byte(`{"i":`))
	if !ok {
		return Payload{}, false
	}
	id, rest, ok := cutInt(rest, `,"t":`)
	if !ok || id < 0 {
		return Payload{}, false
	}
	at, rest, ok := cutInt(rest, `,"p":"`)
	if !ok {
		return Payload{}, false
	}
	pad, ok := bytes.CutSuffix(rest, []byte(`"}`))
	if !ok || bytes.ContainsFunc(pad, func(r rune) bool { return r != 'x' }) {
		return Payload{}, false
	}
	return Payload{ID: id, EnqueuedAt: at, Pad: string(pad)}, true
}

// cutInt parses the decimal integer before sep (JSON's form: an optional
// minus, no leading zeros) and returns what follows sep.
func cutInt(b []byte, sep string) (int64, []byte, bool) {
	num, rest, ok := bytes.Cut(b, []byte(sep))
	digits := bytes.TrimPrefix(num, []byte("-"))
	if !ok || len(digits) == 0 || (len(digits) > 1 && digits[0] == '0') {
		return 0, nil, false
	}
	v, err := strconv.ParseInt(string(num), 10, 64)
	if err != nil || bytes.ContainsFunc(digits, func(r rune) bool { return r < '0' || r > '9' }) {
		return 0, nil, false
	}
	return v, rest, true
}

func parseJSON(b []byte) (Payload, error) {
	var p struct {
		ID         *int64 `json:"i"`
		EnqueuedAt *int64 `json:"t"`
		Pad        string `json:"p"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return Payload{}, fmt.Errorf("%w: %w", ErrBadPayload, err)
	}
	if p.ID == nil || p.EnqueuedAt == nil {
		return Payload{}, fmt.Errorf("%w: the fields \"i\" and \"t\" are required", ErrBadPayload)
	}
	if *p.ID < 0 {
		return Payload{}, fmt.Errorf("%w: negative id %d", ErrBadPayload, *p.ID)
	}
	return Payload{ID: *p.ID, EnqueuedAt: *p.EnqueuedAt, Pad: p.Pad}, nil
}
