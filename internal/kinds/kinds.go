// Package kinds holds the job kinds built into runlog serve: "http" delivers
// an HTTP request to a URL and "exec" runs a command the operator registered
// at start.
//
// Each kind has a request type (HTTPRequest, ExecRequest) that is the job's
// payload, a Validate method that the server calls before a job is enqueued,
// and a runlog.Handler (HTTP, Exec) that performs one attempt and maps its
// result onto runlog outcomes:
//
//	http: 2xx success; network error, 408, 429, 5xx retryable (Retry-After
//	      honoured); 3xx and other 4xx permanent; an address the SSRF
//	      guard refuses (see Guard) permanent, the target not contacted
//	exec: exit 0 success; exit 75 (EX_TEMPFAIL) retryable; any other exit
//	      permanent; killed by a cancelled attempt retryable
package kinds

import (
	"errors"
	"net/http"

	"github.com/runlog/runlog"
)

// Kind names as they appear in job requests and in runlog.Job.Kind.
const (
	KindHTTP = "http"
	KindExec = "exec"
)

// Errors returned by the Validate methods. Each is wrapped with the detail
// that says which value was refused; test with errors.Is.
var (
	// ErrInvalid reports a malformed request (bad URL, method, header...).
	ErrInvalid = errors.New("kinds: invalid request")
	// ErrHostNotAllowed reports a URL whose host is not on the operator's
	// allow-list.
	ErrHostNotAllowed = errors.New("kinds: host not allowed")
	// ErrUnknownCommand reports an exec job naming a command the operator did
	// not register with --exec NAME=PATH.
	ErrUnknownCommand = errors.New("kinds: unknown command")
)

// Config configures the built-in kinds.
type Config struct {
	// Client sends the http kind's requests. Defaults to NewClient(64,
	// &Guard). A client given here must dial through the same Guard (see
	// NewClient), or the guard checks nothing at delivery.
	Client *http.Client
	// Guard is the SSRF guard every delivery dials through.
	Guard Guard
	// Signer, when not nil, signs the deliveries to the targets it has
	// keys for.
	Signer Signer
	// AllowHosts, when not empty, is the list of hosts (or host:port pairs)
	// that http jobs may target. It is checked at enqueue by
	// HTTPRequest.Validate and again before each delivery.
	AllowHosts []string
	// Commands maps the names that exec jobs may use to the programs they
	// run (absolute paths, see ParseCommand). A name not in the map is
	// refused.
	Commands map[string]string
}

// Handlers returns the runlog handlers of the built-in kinds keyed by kind
// name, ready for runlog.Config.Handlers.
func Handlers(cfg Config) map[string]runlog.Handler {
	return map[string]runlog.Handler{
		KindHTTP: HTTP(cfg),
		KindExec: Exec(cfg.Commands),
	}
}
