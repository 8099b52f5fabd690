package kinds

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/runlog/runlog"
)

const (
	// ExitTempFail is the exit status (EX_TEMPFAIL from sysexits.h) with
	// which a command asks to be retried.
	ExitTempFail = 75
	// outputLimit bounds the output (stdout and stderr, interleaved) kept
	// with an attempt: its last outputLimit bytes, leaving room under the 4 KiB
	// that runlog keeps for the note on dropped bytes.
	outputLimit = 4<<10 - 64
	// waitDelay is how long a killed or finished command may keep its
	// output pipes open (through children) before they are closed.
	waitDelay = 2 * time.Second
)

// commandName is what a registered command name may look like.
var commandName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ExecRequest is the payload of an exec job: which registered command to run,
// with which arguments and standard input.
type ExecRequest struct {
	// Command is the name the operator registered with --exec NAME=PATH.
	Command string `json:"command"`
	// Args are passed to the program as its arguments (no shell).
	Args []string `json:"args,omitempty"`
	// Stdin is written to the program's standard input.
	Stdin string `json:"stdin,omitempty"`
}

// Validate checks r against the registered commands before it is enqueued.
// Errors wrap ErrUnknownCommand or ErrInvalid.
func (r *ExecRequest) Validate(commands map[string]string) error {
	if r.Command == "" {
		return fmt.Errorf("%w: command is required for an exec job", ErrInvalid)
	}
	if _, ok := commands[r.Command]; !ok {
		return fmt.Errorf("%w: %q is not registered; the operator registers commands with --exec NAME=PATH", ErrUnknownCommand, r.Command)
	}
	for i, a := range r.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("%w: args[%d] contains a NUL byte", ErrInvalid, i)
		}
	}
	return nil
}

// ParseCommand parses an operator's NAME=PATH registration. PATH is looked up
// like a shell would (exec.LookPath) and made absolute, so that a job always
// runs the program that was checked at start.
func ParseCommand(spec string) (name, path string, err error) {
	name, path, ok := strings.Cut(spec, "=")
	if !ok || name == "" || path == "" {
		return "", "", fmt.Errorf("%w: --exec %q: want NAME=PATH, e.g. --exec resize=/usr/local/bin/resize", ErrInvalid, spec)
	}
	if !commandName.MatchString(name) {
		return "", "", fmt.Errorf("%w: --exec %q: NAME must be letters, digits, '_', '.' or '-' (at most 64)", ErrInvalid, spec)
	}
	found, err := exec.LookPath(path)
	if err != nil {
		return "", "", fmt.Errorf("%w: --exec %q: %v", ErrInvalid, spec, err)
	}
	abs, err := filepath.Abs(found)
	if err != nil {
		return "", "", fmt.Errorf("%w: --exec %q: %v", ErrInvalid, spec, err)
	}
	return name, abs, nil
}

// Exec returns the handler of the exec kind. commands maps registered names
// to programs. The program runs without a shell, with the server's
// environment minus every RUNLOG_* variable (so the API token never leaks)
// plus RUNLOG_JOB_ID and RUNLOG_ATTEMPT. A cancelled or timed-out attempt
// kills it. The last 4 KiB of its output are kept with the attempt.
func Exec(commands map[string]string) runlog.Handler {
	return runlog.Handle(func(ctx context.Context, req ExecRequest) error {
		return run(ctx, commands, req)
	})
}

func run(ctx context.Context, commands map[string]string, req ExecRequest) error {
	if err := req.Validate(commands); err != nil {
		return runlog.Permanent(err)
	}
	path := commands[req.Command]
	cmd := exec.CommandContext(ctx, path, req.Args...)
	cmd.Stdin = strings.NewReader(req.Stdin)
	out := &tailBuffer{max: outputLimit}
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.WaitDelay = waitDelay
	cmd.Env = commandEnv(ctx)
	err := cmd.Run()
	runlog.RecordOutput(ctx, out.Bytes())

	var exitErr *exec.ExitError
	switch {
	case err == nil, errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState.Success():
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("command %q stopped: %w", req.Command, context.Cause(ctx))
	case errors.As(err, &exitErr):
		code := exitErr.ExitCode()
		if code == ExitTempFail {
			return fmt.Errorf("command %q exited %d (EX_TEMPFAIL): will retry", req.Command, code)
		}
		return runlog.Permanent(fmt.Errorf("command %q failed: %v", req.Command, exitErr))
	default:
		return runlog.Permanent(fmt.Errorf("command %q (%s) could not start: %w; check the operator's --exec registration", req.Command, path, err))
	}
}

// commandEnv is the environment of an exec job's program.
func commandEnv(ctx context.Context) []string {
	env := make([]string, 0, len(os.Environ())+2)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RUNLOG_") {
			env = append(env, kv)
		}
	}
	if info, ok := runlog.AttemptFrom(ctx); ok {
		env = append(env,
			"RUNLOG_JOB_ID="+strconv.FormatUint(info.JobID, 10),
			"RUNLOG_ATTEMPT="+strconv.Itoa(info.Attempt))
	}
	return env
}

// tailBuffer is an io.Writer that keeps the last max bytes written to it.
type tailBuffer struct {
	mu      sync.Mutex
	max     int
	buf     []byte // guarded by mu
	dropped int64  // guarded by mu
}

// Write keeps the tail of p and of what came before; it never fails.
func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= t.max {
		t.dropped += int64(len(t.buf) + len(p) - t.max)
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return len(p), nil
	}
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.dropped += int64(over)
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// Bytes returns the kept bytes, preceded by a note when earlier ones were
// dropped.
func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dropped == 0 {
		return append([]byte(nil), t.buf...)
	}
	return append([]byte(fmt.Sprintf("[%d earlier bytes dropped]\n", t.dropped)), t.buf...)
}
