package kinds

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"
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
	if hb, _ := json.Marshal(d.Headers); len(hb) > maxDeliveryDoc/2 {
		names := d.HeaderNames()
		kept := make(map[string]string, len(names))
		size := 2
		for _, k := range names {
			kb, _ := json.Marshal(k)
			vb, _ := json.Marshal(d.Headers[k])
			if size+len(kb)+len(vb)+2 > maxDeliveryDoc/2 {
				break
			}
			size += len(kb) + len(vb) + 2
			kept[k] = d.Headers[k]
		}
		d.Headers, d.HeadersTruncated = kept, true
	}
	for {
		b, _ := json.Marshal(d)
		doc := append([]byte(deliveryMagic), b[1:]...)
		if len(doc) <= maxDeliveryDoc || d.Body == "" {
			return doc
		}
		cut := min(max(len(d.Body)-(len(doc)-maxDeliveryDoc), 0), len(d.Body)-1)
		for cut > 0 && d.Body[cut]&0xC0 == 0x80 {
			cut-- // not inside a UTF-8 sequence
		}
		d.Body, d.BodyTruncated = d.Body[:cut], true
	}
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

// logHeaders returns the bounded set of h that the log keeps.
func logHeaders(h http.Header) map[string]string {
	if len(h) == 0 {
		return nil
	}
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	out := make(map[string]string, min(len(names), MaxLoggedHeaders))
	// HeadersTruncated is set by Encode; more than MaxLoggedHeaders is
	// visible as exactly MaxLoggedHeaders kept.
	for _, k := range names[:min(len(names), MaxLoggedHeaders)] {
		v := ""
		if len(h[k]) > 0 {
			v = h[k][0]
		}
		if len(v) > MaxLoggedHeaderValue {
			v = strings.ToValidUTF8(v[:MaxLoggedHeaderValue], "")
		}
		out[k] = v
	}
	return out
}

// ms returns d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
