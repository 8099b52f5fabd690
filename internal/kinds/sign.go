package kinds

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"io"
	"strconv"
	"strings"
	"sync"
)

// The headers of a signed delivery, as the Standard Webhooks spec names
// them (https://www.standardwebhooks.com).
const (
	// HeaderWebhookID is the message id: the same on every attempt of a
	// job, so that a receiver can deduplicate.
	HeaderWebhookID = "Webhook-Id"
	// HeaderWebhookTimestamp is when the attempt was sent, in seconds
	// since the Unix epoch.
	HeaderWebhookTimestamp = "Webhook-Timestamp"
	// HeaderWebhookSignature is "v1,<base64 HMAC-SHA256>" per active
	// secret, separated by spaces.
	HeaderWebhookSignature = "Webhook-Signature"
)

// SecretPrefix begins every signing secret as the spec writes it: "whsec_"
// and the key in base64.
const SecretPrefix = "whsec_"

// Bounds of a signing key (decoded), as the spec recommends.
const (
	MinKeyBytes = 24
	MaxKeyBytes = 64
)

// Signer gives the http kind what signs a delivery. It must be safe for
// concurrent use and fast: it is asked once per delivery.
type Signer interface {
	// Keys returns the keys (decoded secrets) that sign deliveries to the
	// job's target, every active one; none means unsigned.
	Keys(target string) [][]byte
	// MessageID returns the webhook-id of job id, the same on every attempt.
	MessageID(jobID uint64) string
}

// ParseSecret decodes a signing secret, "whsec_" and 24 to 64 bytes in
// base64 (padded or not), into its key. The error never repeats the
// secret.
func ParseSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: a signing secret begins with %q and goes on in base64 (e.g. %s + 32 random bytes in base64: echo whsec_$(openssl rand -base64 32))", ErrInvalid, SecretPrefix, SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		key, err = base64.RawStdEncoding.DecodeString(b64)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: the part of the signing secret after %q is not base64", ErrInvalid, SecretPrefix)
	}
	if len(key) < MinKeyBytes || len(key) > MaxKeyBytes {
		return nil, fmt.Errorf("%w: the signing secret's key is %d bytes; use %d to %d (e.g. 32 random bytes)", ErrInvalid, len(key), MinKeyBytes, MaxKeyBytes)
	}
	return key, nil
}

// AppendSignature appends "v1,<signature>" of the message id, timestamp and
// body under key to dst: the base64 HMAC-SHA256 of "id.timestamp.body".
func AppendSignature(dst, key []byte, id string, timestamp int64, body string) []byte {
	return appendSignature(dst, hmac.New(sha256.New, key), id, timestamp, body)
}

// appendSignature is AppendSignature with m, a fresh or reset HMAC-SHA256
// of the key.
func appendSignature(dst []byte, m hash.Hash, id string, timestamp int64, body string) []byte {
	var buf [64]byte
	b := append(buf[:0], id...)
	b = append(b, '.')
	b = strconv.AppendInt(b, timestamp, 10)
	b = append(b, '.')
	m.Write(b)
	io.WriteString(m, body)
	sum := m.Sum(buf[:0])
	dst = append(dst, "v1,"...)
	return base64.StdEncoding.AppendEncode(dst, sum)
}

// SignatureHeader returns the webhook-signature value for keys: one
// "v1,<signature>" per key, separated by spaces.
func SignatureHeader(keys [][]byte, id string, timestamp int64, body string) string {
	dst := make([]byte, 0, len(keys)*48)
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ' ')
		}
		dst = AppendSignature(dst, k, id, timestamp, body)
	}
	return string(dst)
}

// macs keeps HMAC-SHA256 states per key for reuse: hmac.New costs
// allocations and two SHA-256 blocks (the padded key), a reset state
// neither. Safe for concurrent use.
type macs struct {
	mu    sync.RWMutex
	pools map[string]*sync.Pool // by key
}

// maxMACKeys bounds how many keys macs keeps states for: past it (keys
// rotated many times over a long run) it starts again empty.
const maxMACKeys = 1024

// header is SignatureHeader, with reused HMAC states.
func (c *macs) header(keys [][]byte, id string, timestamp int64, body string) string {
	var buf [2 * 48]byte
	dst := buf[:0]
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ' ')
		}
		p := c.pool(k)
		m := p.Get().(hash.Hash)
		m.Reset()
		dst = appendSignature(dst, m, id, timestamp, body)
		p.Put(m)
	}
	return string(dst)
}

// pool returns the pool of states of key.
func (c *macs) pool(key []byte) *sync.Pool {
	c.mu.RLock()
	p := c.pools[string(key)]
	c.mu.RUnlock()
	if p != nil {
		return p
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.pools[string(key)]; p != nil {
		return p
	}
	if c.pools == nil || len(c.pools) >= maxMACKeys {
		c.pools = make(map[string]*sync.Pool)
	}
	k := bytes.Clone(key)
	p = &sync.Pool{New: func() any { return hmac.New(sha256.New, k) }}
	c.pools[string(k)] = p
	return p
}
