package runlog

import (
	"errors"

	"github.com/runlog/runlog/internal/store"
)

// Errors returned by the Runner; test them with errors.Is.
var (
	// ErrNotFound: no job has that id (or retention has dropped it).
	ErrNotFound = errors.New("runlog: job not found")
	// ErrFinished: the job already succeeded, failed or was cancelled.
	ErrFinished = errors.New("runlog: job already finished")
	// ErrNotFailed: Retry takes only a failed or cancelled job.
	ErrNotFailed = errors.New("runlog: job is not failed or cancelled")
	// ErrUnknownKind: no handler is registered for the job's kind.
	ErrUnknownKind = errors.New("runlog: no handler is registered for this kind")
	// ErrTooLarge: the payload is larger than Config.MaxPayload.
	ErrTooLarge = errors.New("runlog: payload too large")
	// ErrClosed: the runner is closed.
	ErrClosed = errors.New("runlog: runner closed")
	// ErrInvalid: a configuration value or a job request is not valid.
	ErrInvalid = errors.New("runlog: invalid")
)

// mapErr turns a store error into the public sentinel.
func mapErr(err error) error {
	var notFinished *store.NotFinishedError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound):
		return ErrNotFound
	case errors.Is(err, store.ErrFinished):
		return ErrFinished
	case errors.Is(err, store.ErrNotFailed):
		return ErrNotFailed
	case errors.As(err, &notFinished):
		return notFinishedError(notFinished.Detail())
	case errors.Is(err, store.ErrNotFinished):
		return ErrNotFinished
	case errors.Is(err, store.ErrClosed):
		return ErrClosed
	case errors.Is(err, store.ErrNotDisabled):
		return ErrTargetNotDisabled
	}
	return err
}
