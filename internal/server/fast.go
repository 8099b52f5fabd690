package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/runlog/runlog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// The HTTP server of runlog serve is fasthttp's, not net/http's: on the
// 2-core machine this project is measured on, with the load generator on
// the same cores, net/http answered an empty handler at ~28 k requests/s and
// fasthttp at ~54 k, and POST /v1/jobs (issue 5's bar: 20 k jobs/s made
// durable, 64 connections) is mostly that per-request cost. POST /v1/jobs
// is served natively (fastEnqueue); every other path goes through
// fasthttpadaptor to the net/http handler (API.ServeHTTP), which the tests
// also drive directly with net/http/httptest. Both paths share the
// request's decoding, the engine call and the answer's bytes.

// newHTTPServer returns the server for api under the limits of cfg.
func newHTTPServer(api *API, cfg Config) *fasthttp.Server {
	slow := fasthttpadaptor.NewFastHTTPHandler(api)
	return &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			if ctx.Request.IsBodyStream() && !boundBody(ctx, cfg.MaxBody) {
				return
			}
			if ctx.IsPost() && string(ctx.Path()) == "/v1/jobs" {
				api.fastEnqueue(ctx)
				return
			}
			slow(ctx)
		},
		ErrorHandler: fastError,
		// A request's headers and body must arrive within the read-header
		// timeout (slow clients are cut off: slowloris), answers be sent
		// within WriteTimeout, and an idle keep-alive connection is closed
		// after IdleTimeout.
		ReadTimeout:  cfg.ReadHeaderTimeout,
		WriteTimeout: 2 * time.Minute,
		IdleTimeout:  2 * time.Minute,
		// A body over the limit, or chunked, is handed over as a stream,
		// which boundBody reads within the limit (or refuses).
		MaxRequestBodySize: int(cfg.MaxBody),
		StreamRequestBody:  true,
		ReadBufferSize:     MaxHeaderBytes,
		// Buffers (64 KiB to read, for the header limit) go back to a pool
		// while a connection is idle, so that idle keep-alive connections
		// cost little memory.
		ReduceMemoryUsage:     true,
		NoDefaultServerHeader: true,
		CloseOnShutdown:       true,
		// The dashboard's forms are URL-encoded; nothing is multipart.
		DisablePreParseMultipartForm: true,
		Logger:                       fastLogger{cfg.Logger},
	}
}

// maxDrain is how much of a body over the limit is read and discarded
// before the 413 answer, so that a client that sends its whole body before
// reading the answer gets it rather than a reset connection.
const maxDrain = 64 << 20

// boundBody reads a streamed body (one over the limit, or chunked) into the
// request if it is within limit bytes. Otherwise it answers 413, having read
// and discarded up to maxDrain bytes of it, closes the connection, and
// reports false: nothing of the request is used.
func boundBody(ctx *fasthttp.RequestCtx, limit int64) bool {
	stream := ctx.RequestBodyStream()
	body, err := io.ReadAll(io.LimitReader(stream, limit+1))
	if err != nil {
		fastJSONError(ctx, http.StatusBadRequest, "reading the body: "+err.Error())
		ctx.SetConnectionClose()
		return false
	}
	if int64(len(body)) > limit {
		_, _ = io.Copy(io.Discard, io.LimitReader(stream, maxDrain))
		fastJSONError(ctx, http.StatusRequestEntityTooLarge, tooLarge(limit))
		ctx.SetConnectionClose()
		return false
	}
	ctx.Request.SetBody(body)
	return true
}

// fastEnqueue is POST /v1/jobs, natively: the same checks, engine call and
// answer as API.enqueue (TestFastEnqueueAnswersAsNetHTTP compares them).
func (a *API) fastEnqueue(ctx *fasthttp.RequestCtx) {
	if a.cfg.Token != "" && !a.tokenMatches(string(ctx.Request.Header.Peek("Authorization"))) {
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="runlog"`)
		fastJSONError(ctx, http.StatusUnauthorized, errUnauthorized)
		return
	}
	body := ctx.PostBody()
	if int64(len(body)) > a.cfg.MaxBody {
		fastJSONError(ctx, http.StatusRequestEntityTooLarge, tooLarge(a.cfg.MaxBody))
		return
	}
	res, err := a.enqueueBody(ctx, body)
	if err != nil {
		status := statusOf(err)
		if status >= 500 {
			a.cfg.Logger.Error("request failed", "method", "POST", "path", "/v1/jobs", "err", err)
		}
		fastJSONError(ctx, status, err.Error())
		return
	}
	status := http.StatusCreated
	if res.Existing {
		status = http.StatusOK
	}
	var buf [64]byte
	ctx.SetStatusCode(status)
	ctx.Response.Header.Set("Location", "/v1/jobs/"+strconv.FormatUint(res.ID, 10))
	ctx.SetContentType("application/json")
	ctx.SetBody(appendCreated(buf[:0], res.ID, res.Existing))
}

// enqueueBody decodes the body of POST /v1/jobs and enqueues the job.
func (a *API) enqueueBody(ctx context.Context, body []byte) (runlog.EnqueueResult, error) {
	req, err := DecodeJobRequest(body, a.cfg.Policy)
	if err != nil {
		return runlog.EnqueueResult{}, err
	}
	return a.runner.EnqueueJob(ctx, req)
}

// fastJSONError answers {"error": msg} with status.
func fastJSONError(ctx *fasthttp.RequestCtx, status int, msg string) {
	b, err := marshal(Error{Error: msg})
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encode answer"}`)
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '\n'))
}

// fastError answers the requests the server refuses before any handler:
// headers over MaxHeaderBytes (431), a body over the limit (413), a client
// too slow (408), anything unparsable (400); as JSON, like every answer.
func fastError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		fastJSONError(ctx, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("the request headers are over %d bytes", MaxHeaderBytes))
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		fastJSONError(ctx, http.StatusRequestEntityTooLarge, "the body is over the server's --max-body")
	case errors.As(err, &ne) && ne.Timeout():
		fastJSONError(ctx, http.StatusRequestTimeout, "the request was not received in time")
	default:
		fastJSONError(ctx, http.StatusBadRequest, "malformed HTTP request: "+err.Error())
	}
	ctx.SetConnectionClose()
}

// lingerListener gives connections whose Close is a lingering close, as
// net/http does after an error answer: fasthttp answers a request it refuses
// before reading it all (headers over the limit: 431) and closes at once, and
// a close with unread bytes makes the kernel send a reset, which can destroy
// the answer before the client has read it. Here the write side is shut
// (FIN) at once and the socket is closed once the client has closed its
// side, or after lingerTime, reading and discarding at most lingerBytes
// meanwhile; in the background, so fasthttp's goroutine never waits.
type lingerListener struct{ net.Listener }

const (
	lingerTime  = 500 * time.Millisecond
	lingerBytes = 1 << 20
)

// Accept wraps the accepted connection.
func (l lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		return &lingerConn{TCPConn: tc}, nil
	}
	return c, nil
}

// lingerConn is a TCP connection with a lingering Close.
type lingerConn struct {
	*net.TCPConn
	once sync.Once
}

// Close shuts the write side and closes the socket in the background.
func (c *lingerConn) Close() error {
	c.once.Do(func() {
		if err := c.TCPConn.CloseWrite(); err != nil {
			_ = c.TCPConn.Close()
			return
		}
		go func() {
			_ = c.TCPConn.SetReadDeadline(time.Now().Add(lingerTime))
			_, _ = io.Copy(io.Discard, io.LimitReader(c.TCPConn, lingerBytes))
			_ = c.TCPConn.Close()
		}()
	})
	return nil
}

// fastLogger passes fasthttp's messages to slog as warnings.
type fastLogger struct{ log *slog.Logger }

// Printf logs one message.
func (l fastLogger) Printf(format string, args ...any) {
	l.log.Warn("http server: " + fmt.Sprintf(format, args...))
}
