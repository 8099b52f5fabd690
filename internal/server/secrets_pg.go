package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// pgSecrets keeps the signing secrets in PostgreSQL, in the tables of
// migration 0005 (runlog_signing_secrets, runlog_signing_sender), shared by
// every node; each node reads them again every pgSecretsRefresh to see the
// others' changes.
type pgSecrets struct {
	pool *pgxpool.Pool
}

// pgSecretsRefresh is how often a node reads the secrets again: another
// node's PUT or DELETE takes effect here within it.
const pgSecretsRefresh = 2 * time.Second

func (p *pgSecrets) load(ctx context.Context) (string, map[string][]secretEntry, error) {
	var sender string
	if err := p.pool.QueryRow(ctx, "SELECT sender FROM runlog_signing_sender").Scan(&sender); err != nil {
		return "", nil, fmt.Errorf("read the signing sender id: %w", err)
	}
	targets, err := p.targets(ctx)
	return sender, targets, err
}

func (p *pgSecrets) targets(ctx context.Context) (map[string][]secretEntry, error) {
	rows, err := p.pool.Query(ctx, "SELECT target, secret_id, secret, created_at FROM runlog_signing_secrets ORDER BY target, created_at, secret_id")
	if err != nil {
		return nil, fmt.Errorf("read the signing secrets: %w", err)
	}
	defer rows.Close()
	out := map[string][]secretEntry{}
	for rows.Next() {
		var (
			t string
			e secretEntry
		)
		if err := rows.Scan(&t, &e.ID, &e.Secret, &e.CreatedAt); err != nil {
			return nil, fmt.Errorf("read the signing secrets: %w", err)
		}
		e.CreatedAt = e.CreatedAt.UTC()
		out[t] = append(out[t], e)
	}
	return out, rows.Err()
}

func (p *pgSecrets) add(ctx context.Context, target string, e secretEntry, _ map[string][]secretEntry) error {
	_, err := p.pool.Exec(ctx, "INSERT INTO runlog_signing_secrets (target, secret_id, secret, created_at) VALUES ($1, $2, $3, $4)", target, e.ID, e.Secret, e.CreatedAt)
	return err
}

func (p *pgSecrets) remove(ctx context.Context, target, id string, _ map[string][]secretEntry) error {
	_, err := p.pool.Exec(ctx, "DELETE FROM runlog_signing_secrets WHERE target = $1 AND secret_id = $2", target, id)
	return err
}

// watch reads the secrets again every pgSecretsRefresh until ctx ends.
func (p *pgSecrets) watch(ctx context.Context, s *Secrets, log *slog.Logger) {
	t := time.NewTicker(pgSecretsRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		targets, err := p.targets(ctx)
		if err == nil {
			err = s.replace(targets)
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("cannot read the signing secrets again; deliveries keep the last ones read", "err", err)
		}
	}
}
