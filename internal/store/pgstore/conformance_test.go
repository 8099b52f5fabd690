package pgstore

import (
	"context"
	"testing"

	"github.com/runlog/runlog/internal/pgtest"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/internal/store/storetest"
)

// TestConformance holds the PostgreSQL store to the contract both stores
// share (package storetest), each case on a fresh database.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) (store.Store, func(*testing.T) store.Store) {
		url := pgtest.URL(t)
		openURL := func(t *testing.T) store.Store {
			s, err := Open(context.Background(), url, Options{Circuit: cfg.Circuit, DisableAfterMS: cfg.DisableAfterMS, Retention: cfg.Retention, Limits: cfg.Limits, Migrate: true})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
		return openURL(t), openURL
	})
}
