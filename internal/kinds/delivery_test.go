package kinds

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
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
	hs, more := logHeaders(nil, h)
	if len(hs) != MaxLoggedHeaders || !more {
		t.Fatalf("logHeaders kept %d of 100 headers (more %v); want %d and more", len(hs), more, MaxLoggedHeaders)
	}
	for _, body := range []string{"", "short", strings.Repeat("\x00", responseHead), strings.Repeat("é", responseHead/2), strings.Repeat("<>&\"", responseHead/4)} {
		d := Delivery{Status: 200, StatusLine: "200 OK", DurationMS: 1.5, RemoteAddr: "[2001:db8::1]:443", Headers: headerMap(hs), Body: body}
		for _, doc := range [][]byte{d.Encode(), d.appendDoc(nil, hs, nil)} {
			if len(doc) > maxDeliveryDoc {
				t.Fatalf("document of %d bytes; bound %d", len(doc), maxDeliveryDoc)
			}
			got, ok := DecodeDelivery(doc)
			if !ok || got.Status != 200 || len(got.Headers) == 0 || !got.HeadersTruncated || !strings.HasPrefix(body, got.Body) || got.BodyTruncated != (got.Body != body) {
				t.Fatalf("decoded %v %+v from %d bytes", ok, got, len(doc))
			}
		}
	}
	if _, ok := DecodeDelivery([]byte("200 OK\nbody")); ok {
		t.Error("an older version's output decoded as a delivery log")
	}
}

// jsonDoc is the document of d as encoding/json writes it (HTML escaping
// off), for a d within the bounds: what appendDoc must write by hand.
func jsonDoc(t *testing.T, d Delivery) []byte {
	t.Helper()
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(d); err != nil {
		t.Fatal(err)
	}
	return append([]byte(deliveryMagic), bytes.TrimSuffix(b.Bytes(), []byte("\n"))[1:]...)
}

// TestDeliveryDocMatchesJSON: the hand-written document is byte for byte
// what encoding/json writes, for random deliveries within the bounds
// (every field set or not; quotes, control characters, invalid UTF-8 and
// U+2028 in the strings), and for a remote address given as a net.Addr
// what the address's String gives.
func TestDeliveryDocMatchesJSON(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 18))
	alphabet := []string{"a", "Z", "0", " ", `"`, `\`, "\n", "\t", "\x00", "\x1f", "<", ">", "&", "é", "\u2028", "\u2029", "\xff", "\xe2\x82", "😀"}
	str := func(max int) string {
		var b strings.Builder
		for range rng.IntN(max + 1) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	for i := range 2000 {
		var d Delivery
		if rng.IntN(4) > 0 {
			d.Status = 100 + rng.IntN(500)
		}
		if rng.IntN(4) > 0 {
			d.StatusLine = strconv.Itoa(d.Status) + " " + str(8)
		}
		d.DurationMS = []float64{0, 0.001, 1.5, 12.345, 30000.999, float64(rng.IntN(1e6)) / 1000}[rng.IntN(6)]
		if rng.IntN(3) > 0 {
			d.RemoteAddr = str(10)
		}
		var hs []logHeader
		for range rng.IntN(6) {
			hs = append(hs, logHeader{str(6), str(20)})
		}
		slices.SortFunc(hs, func(a, b logHeader) int { return strings.Compare(a.name, b.name) })
		hs = slices.CompactFunc(hs, func(a, b logHeader) bool { return a.name == b.name })
		d.Headers = headerMap(hs)
		d.HeadersTruncated = rng.IntN(4) == 0
		if rng.IntN(3) > 0 {
			d.Body = str(50)
		}
		d.BodyTruncated = rng.IntN(4) == 0
		if rng.IntN(4) == 0 {
			d.Error = str(30)
		}
		want := jsonDoc(t, d)
		if got := d.appendDoc(nil, hs, nil); !bytes.Equal(got, want) {
			t.Fatalf("case %d: appendDoc wrote\n%s\nencoding/json writes\n%s", i, got, want)
		}
		if got := d.Encode(); !bytes.Equal(got, want) {
			t.Fatalf("case %d: Encode wrote\n%s\nencoding/json writes\n%s", i, got, want)
		}
	}
	for _, a := range []net.Addr{
		&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080},
		&net.TCPAddr{IP: net.ParseIP("127.0.0.1").To4(), Port: 1},
		&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443},
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 443, Zone: "eth0"},
		&net.TCPAddr{Port: 80},
		&net.UnixAddr{Name: "/run/x.sock", Net: "unix"},
	} {
		d := Delivery{Status: 200, DurationMS: 1}
		got := d.appendDoc(nil, nil, a)
		d.RemoteAddr = a.String()
		if want := jsonDoc(t, d); !bytes.Equal(got, want) {
			t.Errorf("remote %v: wrote\n%s\nwant\n%s", a, got, want)
		}
	}
}

// TestLogHeaders: the kept headers are the first MaxLoggedHeaders names in
// order, each with its first value cut to MaxLoggedHeaderValue bytes (and
// to whole UTF-8 sequences), whatever order the map gives them in.
func TestLogHeaders(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(2, 18))
	for _, n := range []int{0, 1, 5, MaxLoggedHeaders - 1, MaxLoggedHeaders, MaxLoggedHeaders + 1, 60} {
		h := http.Header{}
		for len(h) < n {
			v := strings.Repeat("é", rng.IntN(MaxLoggedHeaderValue))
			h[http.CanonicalHeaderKey("X-"+strconv.Itoa(rng.IntN(1000)))] = []string{v, "second"}
		}
		if n > 0 {
			h["Empty"] = nil
		}
		names := make([]string, 0, len(h))
		for k := range h {
			names = append(names, k)
		}
		slices.Sort(names)
		got, more := logHeaders(nil, h)
		if more != (len(names) > MaxLoggedHeaders) || len(got) != min(len(names), MaxLoggedHeaders) {
			t.Fatalf("%d headers: kept %d, more %v", len(names), len(got), more)
		}
		for i, e := range got {
			want := ""
			if vs := h[names[i]]; len(vs) > 0 {
				want = vs[0]
			}
			if len(want) > MaxLoggedHeaderValue {
				want = strings.ToValidUTF8(want[:MaxLoggedHeaderValue], "")
			}
			if e.name != names[i] || e.value != want {
				t.Fatalf("%d headers: entry %d is %q=%q; want %q=%q", len(names), i, e.name, e.value, names[i], want)
			}
		}
	}
}
