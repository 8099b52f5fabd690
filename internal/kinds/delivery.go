package kinds

import (
	"bytes"
	"encoding/json"
	"math"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/runlog/runlog/internal/jsonscan"
)

// Delivery is the delivery log of one attempt of an http job: what the
// target answered, how long it took and which address answered. The http
// kind keeps it as the attempt's output, a small JSON document that starts
// with deliveryMagic (see DecodeDelivery), within the 4 KiB an attempt's
// output may hold.
type Delivery struct {
	// Status is the response status code, 0 when no response came.
	Status int `json:"status,omitempty"`
	// StatusLine is e.g. "200 OK".
	StatusLine string `json:"status_line,omitempty"`
	// DurationMS is how long the delivery took, from sending the request
	// to reading the kept part of the body, in milliseconds.
	DurationMS float64 `json:"duration_ms"`
	// RemoteAddr is the address the connection went to (ip:port), empty
	// when none was made.
	RemoteAddr string `json:"remote_addr,omitempty"`
	// Headers are a bounded set of the response headers: at most
	// MaxLoggedHeaders, the first value of each, at most
	// MaxLoggedHeaderValue bytes of it.
	Headers map[string]string `json:"headers,omitempty"`
	// HeadersTruncated reports that some headers were left out.
	HeadersTruncated bool `json:"headers_truncated,omitempty"`
	// Body is the first bytes of the response body (at most 1 KiB, fewer
	// when the document would pass its bound), as text.
	Body string `json:"body,omitempty"`
	// BodyTruncated reports that the body was longer than Body.
	BodyTruncated bool `json:"body_truncated,omitempty"`
	// Error is why no response came (the attempt's error says it too).
	Error string `json:"error,omitempty"`
}

// Bounds of the delivery log.
const (
	MaxLoggedHeaders     = 24
	MaxLoggedHeaderValue = 256
	// maxDeliveryDoc keeps the document within the attempt output the
	// engine keeps (4 KiB), so that it is never cut.
	maxDeliveryDoc = 4000
)

// deliveryMagic begins every delivery document: an output that begins
// otherwise is an older version's (the status line and the body).
const deliveryMagic = `{"runlog_delivery":1,`

// Encode returns the document of d: deliveryMagic, then d's fields, at most
// maxDeliveryDoc bytes: headers past half of it are dropped (the last names
// first, HeadersTruncated set), then the body is shortened to fit.
func (d Delivery) Encode() []byte {
	hs := make([]logHeader, 0, len(d.Headers))
	for _, k := range d.HeaderNames() {
		hs = append(hs, logHeader{k, d.Headers[k]})
	}
	return d.appendDoc(nil, hs, nil)
}

// logHeader is one response header as the delivery log keeps it.
type logHeader struct{ name, value string }

// appendDoc appends the document of d (Encode's) to dst, written by hand:
// the http kind writes one per attempt. hs are the headers in name order
// (d.Headers is not read); remote, when d.RemoteAddr is empty, is the remote
// address. The document is what encoding/json writes with HTML escaping
// off; TestDeliveryDocMatchesJSON holds it to that.
func (d *Delivery) appendDoc(dst []byte, hs []logHeader, remote net.Addr) []byte {
	start := len(dst)
	body, bodyTruncated := d.Body, d.BodyTruncated
	for {
		dst = append(dst[:start], deliveryMagic...)
		if d.Status != 0 {
			dst = append(dst, `"status":`...)
			dst = strconv.AppendInt(dst, int64(d.Status), 10)
			dst = append(dst, ',')
		}
		if d.StatusLine != "" {
			dst = append(dst, `"status_line":`...)
			dst = jsonscan.AppendString(dst, d.StatusLine)
			dst = append(dst, ',')
		}
		dst = append(dst, `"duration_ms":`...)
		dst = appendFloat(dst, d.DurationMS)
		switch {
		case d.RemoteAddr != "":
			dst = append(dst, `,"remote_addr":`...)
			dst = jsonscan.AppendString(dst, d.RemoteAddr)
		case remote != nil:
			dst = append(dst, `,"remote_addr":`...)
			dst = appendAddr(dst, remote)
		}
		headersTruncated := d.HeadersTruncated
		if len(hs) > 0 {
			var kept bool
			dst, kept = appendHeaders(dst, hs)
			headersTruncated = headersTruncated || !kept
		}
		if headersTruncated {
			dst = append(dst, `,"headers_truncated":true`...)
		}
		if body != "" {
			dst = append(dst, `,"body":`...)
			dst = jsonscan.AppendString(dst, body)
		}
		if bodyTruncated {
			dst = append(dst, `,"body_truncated":true`...)
		}
		if d.Error != "" {
			dst = append(dst, `,"error":`...)
			dst = jsonscan.AppendString(dst, d.Error)
		}
		dst = append(dst, '}')
		size := len(dst) - start
		if size <= maxDeliveryDoc || body == "" {
			return dst
		}
		cut := min(max(len(body)-(size-maxDeliveryDoc), 0), len(body)-1)
		for cut > 0 && body[cut]&0xC0 == 0x80 {
			cut-- // not inside a UTF-8 sequence
		}
		body, bodyTruncated = body[:cut], true
	}
}

// appendHeaders appends `,"headers":{...}` with hs to dst. When the object
// would pass half of maxDeliveryDoc, only the first names that fit in it
// are kept (kept false), and none means no headers field.
func appendHeaders(dst []byte, hs []logHeader) (_ []byte, kept bool) {
	at := len(dst)
	dst = append(dst, `,"headers":{`...)
	obj := len(dst) - 1 // the object's '{'
	var fit [MaxLoggedHeaders + 1]int
	ends := fit[:0] // len(dst) after each entry that fits the bound
	for i, h := range hs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonscan.AppendString(dst, h.name)
		dst = append(dst, ':')
		dst = jsonscan.AppendString(dst, h.value)
		// Encode's bound: the braces, and per entry its text and two
		// bytes, more than it takes by one (the last has no comma).
		if len(dst)-obj+2 <= maxDeliveryDoc/2 {
			ends = append(ends, len(dst))
		}
	}
	if len(dst)-obj+1 <= maxDeliveryDoc/2 {
		return append(dst, '}'), true
	}
	if len(ends) == 0 {
		return dst[:at], false
	}
	return append(dst[:ends[len(ends)-1]], '}'), false
}

// appendFloat appends f as encoding/json writes a float64.
func appendFloat(dst []byte, f float64) []byte {
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) || math.IsNaN(f) || math.IsInf(f, 0) {
		b, err := json.Marshal(f)
		if err != nil {
			return append(dst, '0')
		}
		return append(dst, b...)
	}
	return strconv.AppendFloat(dst, f, 'f', -1, 64)
}

// appendAddr appends the remote address a as a JSON string, without the
// allocations of a.String() for a TCP address.
func appendAddr(dst []byte, a net.Addr) []byte {
	ta, ok := a.(*net.TCPAddr)
	var ip netip.Addr
	if ok {
		ip, ok = netip.AddrFromSlice(ta.IP)
	}
	if !ok || ta.Zone != "" || ta.Port < 0 || ta.Port > math.MaxUint16 {
		return jsonscan.AppendString(dst, a.String())
	}
	dst = append(dst, '"')
	dst = netip.AddrPortFrom(ip.Unmap(), uint16(ta.Port)).AppendTo(dst)
	return append(dst, '"')
}

// DecodeDelivery reads the delivery log of an attempt's output; false when
// the output is not one (an exec job's, or an older version's).
func DecodeDelivery(out []byte) (Delivery, bool) {
	var d Delivery
	if !bytes.HasPrefix(out, []byte(deliveryMagic)) {
		return d, false
	}
	if err := json.Unmarshal(out, &d); err != nil {
		return Delivery{}, false
	}
	return d, true
}

// Text is the output as older versions kept it: the status line and the
// body (or the error).
func (d Delivery) Text() string {
	if d.StatusLine == "" {
		return d.Error
	}
	return d.StatusLine + "\n" + d.Body
}

// HeaderNames returns the names of d.Headers in order.
func (d Delivery) HeaderNames() []string {
	names := make([]string, 0, len(d.Headers))
	for k := range d.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// logHeaders appends to dst the bounded set of h that the log keeps, in
// name order: the first MaxLoggedHeaders names, the first value of each
// cut to MaxLoggedHeaderValue bytes. more reports that h had more names.
// With dst's capacity at MaxLoggedHeaders it does not allocate.
func logHeaders(dst []logHeader, h http.Header) (_ []logHeader, more bool) {
	base := len(dst)
	for k, vs := range h {
		hs := dst[base:]
		i, _ := slices.BinarySearchFunc(hs, k, func(e logHeader, k string) int { return strings.Compare(e.name, k) })
		if len(hs) == MaxLoggedHeaders {
			more = true
			if i == len(hs) {
				continue
			}
			dst = dst[:len(dst)-1] // the last name makes room
		}
		v := ""
		if len(vs) > 0 {
			v = vs[0]
		}
		if len(v) > MaxLoggedHeaderValue {
			v = strings.ToValidUTF8(v[:MaxLoggedHeaderValue], "")
		}
		dst = slices.Insert(dst, base+i, logHeader{k, v})
	}
	return dst, more
}

// headerMap returns hs as Delivery.Headers holds them (nil for none).
func headerMap(hs []logHeader) map[string]string {
	if len(hs) == 0 {
		return nil
	}
	m := make(map[string]string, len(hs))
	for _, h := range hs {
		m[h.name] = h.value
	}
	return m
}

// ms returns d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
