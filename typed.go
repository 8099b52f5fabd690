package runlog

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
)

// JobArgs is the payload type of a typed job: it names the kind of the jobs
// that carry it. Register its handler with AddHandler (or HandleTyped) and
// enqueue its values with Runner.EnqueueArgs or JobRequest.Args: the kind
// then always comes with the type, so a value of one type cannot be sent
// to the handler of another. Kind must return the same non-empty constant
// for every value of the type (it is called on the zero value too).
//
//	type Email struct{ To string }
//
//	func (Email) Kind() string { return "email" }
type JobArgs interface {
	Kind() string
}

// HandleTyped builds the handler of T's kind (T's Kind method) from fn: the
// payload is decoded from JSON into T. Register it under that kind, or let
// AddHandler do it; Open refuses a HandleTyped handler registered under
// another kind. Outcomes and options are those of Handle.
func HandleTyped[T JobArgs](fn func(ctx context.Context, args T) error, opts ...HandlerOption) Handler {
	var zero T
	kind := zero.Kind()
	h := &typedHandler[T]{fn: fn, kind: kind}
	for _, o := range opts {
		o(&h.opts)
	}
	return h
}

// AddHandler registers fn as the handler of T's kind in handlers (the map
// for Config.Handlers), as HandleTyped builds it:
//
//	handlers := map[string]runlog.Handler{}
//	runlog.AddHandler(handlers, func(ctx context.Context, e Email) error { return send(ctx, e) })
//	r, err := runlog.Open(dir, runlog.Config{Handlers: handlers})
//
// It panics, like http.ServeMux.Handle, on a programming error that no
// later call could repair: a nil map, an empty kind, or a kind that has a
// handler already.
func AddHandler[T JobArgs](handlers map[string]Handler, fn func(ctx context.Context, args T) error, opts ...HandlerOption) {
	var zero T
	kind := zero.Kind()
	switch {
	case handlers == nil:
		panic("runlog: AddHandler needs a map: make(map[string]runlog.Handler)")
	case kind == "":
		panic(fmt.Sprintf("runlog: AddHandler: %T.Kind() returns the empty kind; return the kind's name", zero))
	case fn == nil:
		panic(fmt.Sprintf("runlog: AddHandler: the handler of kind %q is nil", kind))
	}
	if _, ok := handlers[kind]; ok {
		panic(fmt.Sprintf("runlog: AddHandler: kind %q (of %T) has a handler already", kind, zero))
	}
	handlers[kind] = HandleTyped(fn, opts...)
}

// EnqueueArgs adds a job of args' kind (args.Kind()) with args as its
// payload, encoded as JSON, and returns its id once the job is durable. It
// refuses, with ErrUnknownKind, a kind that has no handler, and with
// ErrInvalid one whose handler takes another payload type. The options are
// Enqueue's.
func (r *Runner) EnqueueArgs(ctx context.Context, args JobArgs, opts ...EnqueueOption) (uint64, error) {
	if args == nil {
		return 0, fmt.Errorf("%w: EnqueueArgs needs a value whose type has a Kind method, not nil", ErrInvalid)
	}
	req := JobRequest{Args: args}
	for _, o := range opts {
		o(&req)
	}
	res, err := r.EnqueueJob(ctx, req)
	return res.ID, err
}

// encodeArgs resolves req.Args into req.Kind and req.Payload.
func encodeArgs(req *JobRequest) error {
	kind := req.Args.Kind()
	if kind == "" {
		return fmt.Errorf("%w: %T.Kind() returns the empty kind", ErrInvalid, req.Args)
	}
	if req.Kind != "" && req.Kind != kind {
		return fmt.Errorf("%w: the request's Kind %q is not its Args' kind %q (%T); leave Kind empty", ErrInvalid, req.Kind, kind, req.Args)
	}
	if req.Payload != nil {
		return fmt.Errorf("%w: a request has Args or Payload, not both", ErrInvalid)
	}
	b, err := json.Marshal(req.Args)
	if err != nil {
		return fmt.Errorf("%w: args of kind %q do not encode as JSON: %v", ErrInvalid, kind, err)
	}
	req.Kind, req.Payload = kind, b
	return nil
}

// checkPayloadType refuses a Go value that the handler of kind could not
// have been meant for: its type is neither the handler's payload type nor
// a pointer to it. Raw bytes ([]byte, json.RawMessage), nil, and handlers
// of []byte, json.RawMessage or an interface type take any payload.
func checkPayloadType(h Handler, kind string, payload any) error {
	if h == nil || payload == nil {
		return nil
	}
	want := h.argsType()
	if want == nil {
		return nil
	}
	got := reflect.TypeOf(payload)
	if got == bytesType || got == rawType || got == want || (got.Kind() == reflect.Pointer && got.Elem() == want) {
		return nil
	}
	return fmt.Errorf("%w: the handler of kind %q takes a %v payload, not %v; enqueue a %v (or its JSON as []byte)", ErrInvalid, kind, want, got, want)
}

var (
	bytesType = reflect.TypeFor[[]byte]()
	rawType   = reflect.TypeFor[json.RawMessage]()
)

// payloadType is T as argsType reports it: nil for a type that takes any
// payload.
func payloadType[T any]() reflect.Type {
	t := reflect.TypeFor[T]()
	if t == bytesType || t == rawType || t.Kind() == reflect.Interface {
		return nil
	}
	return t
}
