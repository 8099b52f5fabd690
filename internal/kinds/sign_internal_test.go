package kinds

import (
	"strconv"
	"sync"
	"testing"
)

// TestMACsReuse: signatures made with reused HMAC states are those of
// SignatureHeader, from many goroutines at once, for one key and two (a
// rotation), with bodies of every length around a SHA-256 block, and after
// the cache starts again empty.
func TestMACsReuse(t *testing.T) {
	t.Parallel()
	k1, _ := ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	k2, _ := ParseSecret("whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24tdGVzdHM=")
	var c macs
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 130 {
				keys := [][]byte{k1}
				if (g+n)%2 == 1 {
					keys = [][]byte{k1, k2}
				}
				body := string(make([]byte, n))
				id := "msg_" + strconv.Itoa(n)
				if got, want := c.header(keys, id, int64(1614265330+n), body), SignatureHeader(keys, id, int64(1614265330+n), body); got != want {
					t.Errorf("body of %d bytes, %d keys: %s; want %s", n, len(keys), got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := range maxMACKeys + 2 {
		k := []byte(strconv.Itoa(i) + "-a key long enough for the test")
		if got, want := c.header([][]byte{k}, "msg", 1, "{}"), SignatureHeader([][]byte{k}, "msg", 1, "{}"); got != want {
			t.Fatalf("key %d: %s; want %s", i, got, want)
		}
	}
	if len(c.pools) > maxMACKeys {
		t.Fatalf("%d keys cached; bound %d", len(c.pools), maxMACKeys)
	}
}
