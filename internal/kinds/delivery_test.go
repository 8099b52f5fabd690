package kinds

import (
	"net/http"
	"strings"
	"testing"
)

// TestDeliveryEncodeBound: whatever the body and headers, the document fits
// the 4 KiB the engine keeps of an attempt's output (so it is never cut)
// and decodes again.
func TestDeliveryEncodeBound(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	for i := range 100 {
		h.Set("X-H"+strings.Repeat("a", i), strings.Repeat("\x01", 1000))
	}
	for _, body := range []string{"", "short", strings.Repeat("\x00", responseHead), strings.Repeat("é", responseHead/2), strings.Repeat("<>&\"", responseHead/4)} {
		d := Delivery{Status: 200, StatusLine: "200 OK", DurationMS: 1.5, RemoteAddr: "[2001:db8::1]:443", Headers: logHeaders(h), Body: body}
		doc := d.Encode()
		if len(doc) > maxDeliveryDoc {
			t.Fatalf("document of %d bytes; bound %d", len(doc), maxDeliveryDoc)
		}
		got, ok := DecodeDelivery(doc)
		if !ok || got.Status != 200 || len(got.Headers) == 0 || !got.HeadersTruncated || !strings.HasPrefix(body, got.Body) || got.BodyTruncated != (got.Body != body) {
			t.Fatalf("decoded %v %+v from %d bytes", ok, got, len(doc))
		}
	}
	if _, ok := DecodeDelivery([]byte("200 OK\nbody")); ok {
		t.Error("an older version's output decoded as a delivery log")
	}
}
