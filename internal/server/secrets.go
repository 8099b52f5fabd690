package server

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/runlog/runlog/internal/kinds"
)

// SecretsFile is the file in the data directory that holds the per-target
// signing secrets of the embedded store (mode 0600, written atomically). It
// is not part of the journal: journal dump, snapshots and the API never
// show what it holds.
const SecretsFile = "signing-secrets.json"

// ErrSecretNotFound is returned for a DELETE naming a secret the target
// does not have.
var ErrSecretNotFound = errors.New("server: no such secret")

// SecretInfo is what the API shows of a secret: its id and creation time,
// never the secret.
type SecretInfo struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
}

// secretEntry is one stored secret.
type secretEntry struct {
	ID        string    `json:"id"`
	Secret    string    `json:"secret"`
	CreatedAt time.Time `json:"created_at"`
}

// secretsDoc is the content of SecretsFile.
type secretsDoc struct {
	Version int                      `json:"version"`
	Sender  string                   `json:"sender"`
	Targets map[string][]secretEntry `json:"targets"`
}

// secretBackend keeps the per-target secrets durable: a file in the data
// directory, or a table in PostgreSQL.
type secretBackend interface {
	// load returns the sender id and every target's secrets.
	load(ctx context.Context) (sender string, targets map[string][]secretEntry, err error)
	// add stores e as a secret of target.
	add(ctx context.Context, target string, e secretEntry, all map[string][]secretEntry) error
	// remove drops the secret id of target.
	remove(ctx context.Context, target, id string, all map[string][]secretEntry) error
}

// Secrets holds the signing secrets of runlog serve: the default secret
// (--signing-secret-file) and each target's own (PUT /v1/targets/secrets).
// A target with secrets of its own is signed with every one of them (a
// rotation keeps the old one active until it is deleted); any other target
// with the default secret, if there is one. It is the http kind's
// kinds.Signer. Secrets never leave it but as HMAC keys for the kind.
type Secrets struct {
	backend secretBackend
	def     [][]byte
	sender  string

	mu      sync.Mutex // serialises changes
	targets map[string][]secretEntry
	keys    atomic.Pointer[map[string][][]byte] // target → decoded keys, replaced on change
}

// newSecrets loads the stored secrets from b; def is the default secret
// ("" for none).
func newSecrets(ctx context.Context, b secretBackend, def string) (*Secrets, error) {
	s := &Secrets{backend: b}
	if def != "" {
		k, err := kinds.ParseSecret(def)
		if err != nil {
			return nil, fmt.Errorf("the default signing secret: %w", err)
		}
		s.def = [][]byte{k}
	}
	sender, targets, err := b.load(ctx)
	if err != nil {
		return nil, err
	}
	s.sender, s.targets = sender, targets
	if err := s.publish(); err != nil {
		return nil, err
	}
	return s, nil
}

// publish rebuilds the keys the deliveries read from s.targets.
func (s *Secrets) publish() error {
	m := make(map[string][][]byte, len(s.targets))
	for t, es := range s.targets {
		for _, e := range es {
			k, err := kinds.ParseSecret(e.Secret)
			if err != nil {
				return fmt.Errorf("stored signing secret %s of target %s: %w", e.ID, t, err)
			}
			m[t] = append(m[t], k)
		}
	}
	s.keys.Store(&m)
	return nil
}

// Keys returns the keys that sign deliveries to target: its own, else the
// default, else none.
func (s *Secrets) Keys(target string) [][]byte {
	if own := (*s.keys.Load())[target]; len(own) > 0 {
		return own
	}
	return s.def
}

// MessageID returns "msg_<sender>_<job id>": the sender id is random, made
// once per data directory (or database), so that two servers' job 1 are
// two messages.
func (s *Secrets) MessageID(jobID uint64) string {
	return "msg_" + s.sender + "_" + strconv.FormatUint(jobID, 10)
}

// HasDefault reports whether a default secret is set.
func (s *Secrets) HasDefault() bool { return len(s.def) > 0 }

// Add adds secret to target (secret "" makes a new one, returned once) and
// returns the secret's id and creation time.
func (s *Secrets) Add(ctx context.Context, target, secret string) (SecretInfo, string, error) {
	target, err := secretTarget(target)
	if err != nil {
		return SecretInfo{}, "", err
	}
	made := ""
	if secret == "" {
		var b [32]byte
		_, _ = rand.Read(b[:])
		secret = kinds.SecretPrefix + base64.StdEncoding.EncodeToString(b[:])
		made = secret
	}
	if _, err := kinds.ParseSecret(secret); err != nil {
		return SecretInfo{}, "", badRequest("secret: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.targets[target] {
		if e.Secret == secret {
			return SecretInfo{}, "", badRequest("target %s already has this secret (id %s)", target, e.ID)
		}
	}
	if len(s.targets[target]) >= maxSecretsPerTarget {
		return SecretInfo{}, "", badRequest("target %s has %d secrets, the most it may have; DELETE one before adding another", target, maxSecretsPerTarget)
	}
	e := secretEntry{ID: newID("sec_"), Secret: secret, CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	next := cloneTargets(s.targets)
	next[target] = append(next[target], e)
	if err := s.backend.add(ctx, target, e, next); err != nil {
		return SecretInfo{}, "", fmt.Errorf("store the signing secret: %w", err)
	}
	s.targets = next
	return SecretInfo{ID: e.ID, CreatedAt: e.CreatedAt}, made, s.publish()
}

// Remove retires the secret id of target.
func (s *Secrets) Remove(ctx context.Context, target, id string) error {
	target, err := secretTarget(target)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.targets[target], func(e secretEntry) bool { return e.ID == id })
	if i < 0 {
		return fmt.Errorf("%w: target %s has no secret %q; GET /v1/targets lists the ids", ErrSecretNotFound, target, id)
	}
	next := cloneTargets(s.targets)
	next[target] = slices.Delete(slices.Clone(next[target]), i, i+1)
	if len(next[target]) == 0 {
		delete(next, target)
	}
	if err := s.backend.remove(ctx, target, id, next); err != nil {
		return fmt.Errorf("remove the signing secret: %w", err)
	}
	s.targets = next
	return s.publish()
}

// List returns each target's secret ids and creation times.
func (s *Secrets) List() map[string][]SecretInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]SecretInfo, len(s.targets))
	for t, es := range s.targets {
		for _, e := range es {
			out[t] = append(out[t], SecretInfo{ID: e.ID, CreatedAt: e.CreatedAt})
		}
	}
	return out
}

// replace swaps in targets read from the backend (another node's change).
func (s *Secrets) replace(targets map[string][]secretEntry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.targets = targets
	return s.publish()
}

// maxSecretsPerTarget bounds a rotation's active secrets.
const maxSecretsPerTarget = 10

// secretTarget checks and normalises the target of a secret: an http URL
// becomes its scheme://host:port (the http kind's target, as jobs get it),
// any other value (a job's own target name) is kept as is.
func secretTarget(t string) (string, error) {
	if t == "" {
		return "", badRequest("target is required: the job target the secret signs for, e.g. http://127.0.0.1:9000")
	}
	if len(t) > maxTargetLen {
		return "", badRequest("target is %d bytes, at most %d are allowed", len(t), maxTargetLen)
	}
	if strings.ContainsFunc(t, unicode.IsControl) {
		return "", badRequest("target has a control character")
	}
	if strings.HasPrefix(strings.ToLower(t), "http://") || strings.HasPrefix(strings.ToLower(t), "https://") {
		norm, err := kinds.HTTPTarget(t)
		if err != nil {
			return "", invalid(err)
		}
		return norm, nil
	}
	return t, nil
}

func cloneTargets(m map[string][]secretEntry) map[string][]secretEntry {
	out := make(map[string][]secretEntry, len(m)+1)
	for k, v := range m {
		out[k] = slices.Clone(v)
	}
	return out
}

func newID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// fileSecrets keeps the secrets in SecretsFile in the data directory.
type fileSecrets struct {
	path   string
	sender string
}

func (f *fileSecrets) load(context.Context) (string, map[string][]secretEntry, error) {
	b, err := os.ReadFile(f.path)
	if errors.Is(err, os.ErrNotExist) {
		f.sender = newID("")
		return f.sender, map[string][]secretEntry{}, f.write(map[string][]secretEntry{})
	}
	if err != nil {
		return "", nil, fmt.Errorf("read the signing secrets: %w", err)
	}
	var doc secretsDoc
	if err := json.Unmarshal(b, &doc); err != nil || doc.Version != 1 || doc.Sender == "" {
		return "", nil, fmt.Errorf("%s is damaged (%v): restore it from a backup, or move it away to start without per-target secrets", f.path, err)
	}
	if doc.Targets == nil {
		doc.Targets = map[string][]secretEntry{}
	}
	f.sender = doc.Sender
	return doc.Sender, doc.Targets, nil
}

func (f *fileSecrets) add(_ context.Context, _ string, _ secretEntry, all map[string][]secretEntry) error {
	return f.write(all)
}

func (f *fileSecrets) remove(_ context.Context, _, _ string, all map[string][]secretEntry) error {
	return f.write(all)
}

// write replaces the file atomically: a new file of mode 0600, synced,
// renamed over the old one, and the directory synced.
func (f *fileSecrets) write(all map[string][]secretEntry) error {
	b, err := json.MarshalIndent(secretsDoc{Version: 1, Sender: f.sender, Targets: all}, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(f.path)
	tmp, err := os.CreateTemp(dir, SecretsFile+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), f.path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
