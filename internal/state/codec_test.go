package state

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runlog/runlog/retry"
)

var update = flag.Bool("update", false, "rewrite testdata/ops.golden from the current encoder")

// goldenOps is one op of every kind and shape; their encodings are pinned
// in testdata/ops.golden.
func goldenOps() []struct {
	name string
	op   Op
} {
	spec := &Spec{
		Kind: "email", Target: "smtp://mail.example.com:25", Payload: []byte("hi"), Key: "order-42",
		Policy: retry.Policy{Attempts: 3, BaseMS: 500, CapMS: 30000, DeadlineMS: 60000}, TimeoutMS: 10000,
	}
	return []struct {
		name string
		op   Op
	}{
		{"enqueue", Op{Kind: OpEnqueue, ID: 1, At: 1700000000000, Due: 1700000000500, Spec: spec}},
		{"enqueue-minimal", Op{Kind: OpEnqueue, ID: 2, At: 0, Due: -1, Spec: &Spec{Policy: retry.Policy{Attempts: 1}}}},
		{"start", Op{Kind: OpStart, ID: 1, At: 1700000000500, Attempt: 1}},
		{"requeue", Op{Kind: OpRequeue, ID: 1, At: 1700000000600, Due: 1700000001100, Attempt: 1, Class: retry.Retryable, BreakerFailed: true, Error: "503", Output: []byte("busy")}},
		{"succeed", Op{Kind: OpSucceed, ID: 1, At: 1700000001200, Attempt: 2, Class: retry.Success}},
		{"fail-attempt", Op{Kind: OpFail, ID: 7, At: 1700000000000, Attempt: 3, Class: retry.Permanent, Error: "permanent failure: 404"}},
		{"fail-admission", Op{Kind: OpFail, ID: 7, At: 1700000000000, Error: "deadline passed before the first attempt"}},
		{"defer", Op{Kind: OpDefer, ID: 7, At: 1700000000000, Due: 1700000030000}},
		{"cancel", Op{Kind: OpCancel, ID: 7, At: 1700000000000, Error: "by operator"}},
		{"retry", Op{Kind: OpRetry, ID: 18446744073709551615, At: 1700000000000, Due: 1700000000000}},
		{"expire", Op{Kind: OpExpire, At: 1700000000000, Retention: &Retention{SucceededMS: 86400000, CancelledMS: 86400000, FailedMS: 604800000,
			PerKind: []KindRetention{{Kind: "audit", SucceededMS: 0, CancelledMS: 3600000, FailedMS: -1}, {Kind: "email", SucceededMS: 60000}}}}},
		{"enqueue-ext", Op{Kind: OpEnqueue, ID: 3, At: 1700000000000, Due: 1700000000000, Spec: &Spec{Kind: "report",
			Policy: retry.Policy{Attempts: 1}, Queue: "bulk", Priority: -2, Schedule: "nightly", Tick: 1700000000000}}},
		{"enqueue-ext-priority", Op{Kind: OpEnqueue, ID: 4, At: 1, Due: 1, Spec: &Spec{Priority: 2147483647}}},
		{"enqueue-metadata", Op{Kind: OpEnqueue, ID: 5, At: 1, Due: 1, Spec: &Spec{Kind: "email", Metadata: []Meta{
			{"tenant", "acme"}, {"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}}}},
		{"enqueue-replay", Op{Kind: OpEnqueue, ID: 6, At: 1, Due: 1, Spec: &Spec{Kind: "http", ReplayOf: 5}}},
		{"queue", Op{Kind: OpQueue, At: 1700000000000, Queue: &QueueSetting{Name: "bulk", Concurrency: 4, Paused: true}}},
		{"queue-default", Op{Kind: OpQueue, At: 1700000000000, Queue: &QueueSetting{}}},
		{"snooze", Op{Kind: OpSnooze, ID: 7, At: 1700000000000, Attempt: 2, Due: 1700000060000}},
		{"schedule-create-cron", Op{Kind: OpSchedule, At: 1700000000000, Sched: &ScheduleChange{Action: SchedCreate, Name: "nightly",
			Def: &ScheduleDef{Cron: "0 3 * * *", Zone: "Europe/Paris", Overlap: OverlapSkip, CatchUp: CatchUpLatest,
				Job: Spec{Kind: "report", Target: "http://127.0.0.1:9000", Payload: []byte("{}"), Policy: retry.Policy{Attempts: 3, BaseMS: 1000}, Queue: "bulk", Priority: 5}}}}},
		{"schedule-create-every", Op{Kind: OpSchedule, At: 1700000000000, Sched: &ScheduleChange{Action: SchedCreate, Name: "tick.1s",
			Def: &ScheduleDef{EveryMS: 1000, CatchUp: CatchUpAll, Job: Spec{Kind: "ping", Policy: retry.Policy{Attempts: 1}}}}}},
		{"schedule-update", Op{Kind: OpSchedule, At: 1700000001000, Sched: &ScheduleChange{Action: SchedUpdate, Name: "tick.1s",
			Def: &ScheduleDef{EveryMS: 60000, CatchUp: CatchUpSkip, Job: Spec{Kind: "ping", Policy: retry.Policy{Attempts: 1}}}}}},
		{"schedule-pause", Op{Kind: OpSchedule, At: 1700000002000, Sched: &ScheduleChange{Action: SchedPause, Name: "nightly"}}},
		{"schedule-resume", Op{Kind: OpSchedule, At: 1700000003000, Sched: &ScheduleChange{Action: SchedResume, Name: "nightly"}}},
		{"schedule-delete", Op{Kind: OpSchedule, At: 1700000004000, Sched: &ScheduleChange{Action: SchedDelete, Name: "nightly"}}},
		{"schedule-skip", Op{Kind: OpSchedule, At: 1700000005000, Sched: &ScheduleChange{Action: SchedSkip, Name: "tick.1s", Tick: 1700000005000}}},
		{"target-disable", Op{Kind: OpTarget, At: 1700000006000, Life: &TargetChange{Target: "http://127.0.0.1:9000/hook", Disable: true, Reason: "the target answered gone: http 410"}}},
		{"target-enable", Op{Kind: OpTarget, At: 1700000007000, Life: &TargetChange{Target: "http://127.0.0.1:9000/hook"}}},
		{"discard", Op{Kind: OpDiscard, ID: 7, At: 1700000009000, Image: &Job{ID: 7, State: Failed, Due: 1700000000000,
			EnqueuedAt: 1700000000000, Run: &Run{FirstDue: 1700000000000, Started: 1, FinishedAt: 1700000002000, Fails: 1, Reason: "permanent failure: 404", Part: 1700604800000,
				Attempts: []Attempt{{N: 1, StartedAt: 1700000001000, EndedAt: 1700000002000, Class: retry.Permanent, Ended: true, Error: "404"}}},
			Spec: &Spec{Kind: "email", Target: "smtp://mail.example.com:25", Key: "order-42", Policy: retry.Policy{Attempts: 3}, Queue: "bulk"}}}},
		{"limit", Op{Kind: OpLimit, At: 1700000000000, Target: "http://127.0.0.1:9000", Limit: retry.Limit{RateMilli: 100000, Burst: 10}}},
		{"limit-removed", Op{Kind: OpLimit, At: 1700000000000, Target: "http://127.0.0.1:9000"}},
		{"requeue-hold", Op{Kind: OpRequeue, ID: 1, At: 1700000000600, Due: 1700000300600, Attempt: 1, Class: retry.Retryable, BreakerFailed: true, Error: "HTTP 429", HoldUntil: 1700000300600}},
		{"fail-hold", Op{Kind: OpFail, ID: 1, At: 1700000000600, Attempt: 3, Class: retry.Retryable, BreakerFailed: true, Error: "gave up", HoldUntil: 1700000300600}},
		{"queue-limited", Op{Kind: OpQueue, At: 1700000000000, Queue: &QueueSetting{Name: "mail", Concurrency: 2, Limit: retry.Limit{RateMilli: 100000, Burst: 10}}}},
		{"queue-limited-paused", Op{Kind: OpQueue, At: 1700000000000, Queue: &QueueSetting{Paused: true, Limit: retry.Limit{RateMilli: 1, Burst: 1}}}},
	}
}

func TestGoldenEncoding(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	for _, g := range goldenOps() {
		fmt.Fprintf(&out, "%s %s\n", g.name, hex.EncodeToString(Encode(nil, &g.op)))
	}
	path := filepath.Join("testdata", "ops.golden")
	if *update {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/state -run TestGoldenEncoding -update to create it)", err)
	}
	if got := out.String(); got != string(want) {
		t.Fatalf("the op encoding changed; a changed format needs a new FormatVersion, not new bytes for version 1.\n"+
			"got:\n%s\nwant:\n%s\n(if the change is intended, rerun with -update)", got, want)
	}
	// Every golden record decodes back to its op.
	for _, line := range strings.Split(strings.TrimSpace(string(want)), "\n") {
		name, hx, _ := strings.Cut(line, " ")
		b, err := hex.DecodeString(hx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		op, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: Decode: %v", name, err)
		}
		for _, g := range goldenOps() {
			if g.name == name {
				if d := opDiff(op, g.op); d != "" {
					t.Errorf("%s: decoded %s", name, d)
				}
			}
		}
	}
}

// discardRecord is the record of an OpDiscard of job id whose image is job
// 7 in state st with payload p.
func discardRecord(id uint64, st JobState, p []byte) []byte {
	return Encode(nil, &Op{Kind: OpDiscard, ID: id, At: 1, Image: &Job{ID: 7, State: st, Spec: &Spec{Kind: "k", Payload: p}}})
}

// TestEncodeFirstBytes pins the layout by hand for one record, so the
// golden file is not the only witness.
func TestEncodeFirstBytes(t *testing.T) {
	t.Parallel()
	got := Encode(nil, &Op{Kind: OpStart, ID: 300, At: -1, Attempt: 2})
	want := []byte{1, byte(OpStart), 0xac, 0x02, 0x01, 0x02}
	if !bytes.Equal(got, want) {
		t.Fatalf("Encode(start) = % x, want % x", got, want)
	}
	if got := Encode([]byte{9}, &Op{Kind: OpCancel, ID: 1}); !bytes.Equal(got, []byte{9, 1, byte(OpCancel), 1, 0, 0}) {
		t.Fatalf("Encode does not append: % x", got)
	}
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	valid := Encode(nil, &goldenOps()[3].op) // a retry, which has every outcome field
	enq := Encode(nil, &goldenOps()[0].op)
	tests := []struct {
		name  string
		b     []byte
		want  string
		newer bool
	}{
		{"empty", nil, "at least 2 bytes", false},
		{"one byte", []byte{1}, "at least 2 bytes", false},
		{"version 0", []byte{0, 1, 1, 0}, "unknown record format version 0", false},
		{"newer version", []byte{4, 1, 1, 0}, "format version 4", true},
		{"extension version on another kind", []byte{3, 2, 1, 0}, "only enqueues carry a spec extension", false},
		{"image version on another kind", []byte{2, 1, 1, 0}, "only retries carry an image", false},
		{"kind 0", []byte{1, 0, 1, 0}, "unknown op kind 0", false},
		{"kind 200", []byte{1, 200, 1, 0}, "unknown op kind 200", false},
		{"queue with an id", []byte{1, byte(OpQueue), 1, 0, 0, 0, 0}, "queue op with job id 1", false},
		{"queue flags 4", []byte{1, byte(OpQueue), 0, 0, 0, 0, 4}, "queue flags 0x4", false},
		{"queue limit without its rate", []byte{1, byte(OpQueue), 0, 0, 0, 0, 2}, "rate: varint runs past the end", false},
		{"queue limit of rate 0", []byte{1, byte(OpQueue), 0, 0, 0, 0, 2, 0, 0}, "is not a limit", false},
		{"queue limit of burst 0", []byte{1, byte(OpQueue), 0, 0, 0, 0, 2, 1, 0}, "is not a limit", false},
		{"queue limit rate out of range", []byte{1, byte(OpQueue), 0, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 1}, "out of range", false},
		{"queue concurrency beyond int32", []byte{1, byte(OpQueue), 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x08, 0}, "concurrency 2147483648", false},
		{"snooze without due", []byte{1, byte(OpSnooze), 1, 0, 1}, "due: varint runs past the end", false},
		{"snooze with id 0", []byte{1, byte(OpSnooze), 0, 0, 1, 0}, "job id 0", false},
		{"expire with an id", []byte{1, 9, 1, 0, 0, 0, 0, 0}, "expire op with job id 1", false},
		{"expire with unsorted kinds", []byte{1, 9, 0, 0, 0, 0, 0, 2, 1, 0x62, 0, 0, 0, 1, 0x61, 0, 0, 0}, "not sorted", false},
		{"id 0", []byte{1, byte(OpCancel), 0, 0, 0}, "job id 0", false},
		{"truncated id", []byte{1, byte(OpCancel), 0x80}, "id: varint runs past the end", false},
		{"non-minimal id", []byte{1, byte(OpCancel), 0x81, 0x00, 0, 0}, "id: non-minimal varint", false},
		{"overflowing id", []byte{1, byte(OpCancel), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0}, "id: varint overflows", false},
		{"missing at", []byte{1, byte(OpCancel), 1}, "at: varint runs past the end", false},
		{"attempt over 32 bits", []byte{1, byte(OpStart), 1, 0, 0x80, 0x80, 0x80, 0x80, 0x10}, "does not fit 32 bits", false},
		{"missing class", []byte{1, byte(OpSucceed), 1, 0, 1}, "class: missing", false},
		{"class 5", []byte{1, byte(OpSucceed), 1, 0, 1, 5, 0, 0, 0}, "class 5 out of range", false},
		{"unknown flag", []byte{1, byte(OpSucceed), 1, 0, 1, 1, 4, 0, 0}, "unknown flags 0x4", false},
		{"hold flag without hold", []byte{1, byte(OpSucceed), 1, 0, 1, 1, 2, 0, 0}, "hold until", false},
		{"hold until 0", []byte{1, byte(OpSucceed), 1, 0, 1, 1, 2, 0, 0, 0}, "hold until 0", false},
		{"limit with a job id", []byte{1, 12, 1, 0, 0, 0, 0}, "has none", false},
		{"limit with burst 0", []byte{1, 12, 0, 0, 1, 'a', 1, 0}, "burst 0", false},
		{"limit burst without rate", []byte{1, 12, 0, 0, 1, 'a', 0, 1}, "rate 0", false},
		{"string past the end", []byte{1, byte(OpCancel), 1, 0, 5, 'a'}, "reason: length 5 but only 1 bytes left", false},
		{"trailing byte", append(append([]byte(nil), valid...), 0), "1 trailing bytes after a requeue op", false},
		{"retry without due", valid[:len(valid)-1], "due: varint runs past the end", false},
		{"enqueue cut in a string", enq[:30], "target: length 26 but only 8 bytes left", false},
		{"enqueue cut in the policy", enq[:len(enq)-2], "timeout: varint runs past the end", false},
		{"discard without image", []byte{1, byte(OpDiscard), 1, 0}, "id: varint runs past the end", false},
		{"discard of another job's image", discardRecord(8, Failed, nil), "discard of job 8 carries an image of job 7", false},
		{"discard of a pending job", discardRecord(7, Pending, nil), "in state pending", false},
		{"discard image with a payload", discardRecord(7, Failed, []byte("p")), "with 1 payload bytes", false},
		{"empty extension block", extRecord(0), "empty spec extension block", false},
		{"extension tags out of order", extRecord(2, extPriority, 2, extQueue, 1, 'q'), "tag 1 after tag 2", false},
		{"extension tag repeated", extRecord(2, extPriority, 2, extPriority, 4), "tag 2 after tag 2", false},
		{"empty queue written", extRecord(1, extQueue, 0), "empty queue written", false},
		{"priority 0 written", extRecord(1, extPriority, 0), "priority 0", false},
		{"priority beyond int32", extRecord(1, extPriority, 0x80, 0x80, 0x80, 0x80, 0x10), "out of range", false},
		{"tick 0 written", extRecord(1, extTick, 0), "tick 0 written", false},
		{"unknown extension tag", extRecord(1, 63, 0), "spec extension tag 63", true},
		{"extension cut", extRecord(1, extSchedule, 3, 'a'), "schedule: length 3", false},
		{"no metadata entries", extRecord(1, extMetadata, 0), "0 metadata entries", false},
		{"replay of job 0", extRecord(1, extReplayOf, 0), "replay of job 0 written", false},
		{"metadata entries beyond the input", extRecord(1, extMetadata, 9, 1, 'a', 0), "9 metadata entries", false},
		{"empty metadata key", extRecord(1, extMetadata, 1, 0, 1, 'v'), `metadata key "" is empty`, false},
		{"metadata keys out of order", extRecord(1, extMetadata, 2, 1, 'b', 0, 1, 'a', 0), `metadata key "a" is empty or not after "b"`, false},
		{"metadata key repeated", extRecord(1, extMetadata, 2, 1, 'a', 0, 1, 'a', 0), `metadata key "a" is empty or not after "a"`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op, err := Decode(tt.b)
			if !errors.Is(err, ErrBadOp) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Decode(% x) = %+v, %v; want ErrBadOp mentioning %q", tt.b, op, err, tt.want)
			}
			if errors.Is(err, ErrNewerFormat) != tt.newer {
				t.Fatalf("errors.Is(err, ErrNewerFormat) = %v, want %v", !tt.newer, tt.newer)
			}
			if op.Kind != 0 || op.Spec != nil {
				t.Fatalf("a rejected record returned a non-zero op %+v", op)
			}
		})
	}
}

// extRecord returns an enqueue record of version 3 (a minimal spec) whose
// extension block is the given bytes.
func extRecord(block ...byte) []byte {
	b := []byte{ExtFormatVersion, byte(OpEnqueue), 1, 0, 0}
	b = putSpec(b, &Spec{})
	return append(b, block...)
}

// TestSpecExtOnlyWhenSet checks that a spec whose extension fields are all
// zero is encoded as before they existed (version 1), and that each field
// alone round-trips through both an enqueue record and a job record.
func TestSpecExtOnlyWhenSet(t *testing.T) {
	t.Parallel()
	plain := Encode(nil, &Op{Kind: OpEnqueue, ID: 1, Spec: &Spec{Kind: "k"}})
	if plain[0] != FormatVersion {
		t.Fatalf("a spec without extension fields is written in version %d, want %d", plain[0], FormatVersion)
	}
	for _, sp := range []Spec{{Queue: "q"}, {Priority: -1}, {Priority: math.MinInt32}, {Schedule: "s"}, {Tick: -5}, {Metadata: []Meta{{"k", ""}}}, {ReplayOf: 1 << 40}} {
		b := Encode(nil, &Op{Kind: OpEnqueue, ID: 1, Spec: &sp})
		if b[0] != ExtFormatVersion {
			t.Fatalf("%+v: version %d, want %d", sp, b[0], ExtFormatVersion)
		}
		op, err := Decode(b)
		if err != nil || !specEqual(op.Spec, &sp) {
			t.Fatalf("%+v: decoded %+v, %v", sp, op.Spec, err)
		}
		j := &Job{ID: 1, Spec: &sp, State: Pending}
		back, err := DecodeJob(AppendJob(nil, j))
		if err != nil || !specEqual(back.Spec, &sp) {
			t.Fatalf("%+v: job record decoded %+v, %v", sp, back, err)
		}
	}
	// A job record whose flags name an unknown bit was written by a newer
	// build.
	rec := AppendJob(nil, &Job{ID: 1, Spec: &Spec{}, State: Pending})
	rec[len(rec)-1] = 4
	if _, err := DecodeJob(rec); !errors.Is(err, ErrNewerFormat) {
		t.Fatalf("unknown job flag: %v, want ErrNewerFormat", err)
	}
}

// TestDecodeDoesNotAlias checks that a decoded op keeps no reference to the
// record's bytes (the journal reuses its buffers).
func TestDecodeDoesNotAlias(t *testing.T) {
	t.Parallel()
	for _, g := range goldenOps() {
		b := Encode(nil, &g.op)
		op, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", g.name, err)
		}
		for i := range b {
			b[i] = 0xee
		}
		if d := opDiff(op, g.op); d != "" {
			t.Errorf("%s: after overwriting the record the op changed: %s", g.name, d)
		}
	}
}

func TestEncodeEdgeRoundTrips(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		op   Op
		want Op
	}{
		{"enqueue without spec reads back an empty spec", Op{Kind: OpEnqueue, ID: 1}, Op{Kind: OpEnqueue, ID: 1, Spec: &Spec{}}},
		{"negative policy fields survive", Op{Kind: OpEnqueue, ID: 1, Spec: &Spec{Policy: retry.Policy{Attempts: -1, BaseMS: -2, CapMS: -3, DeadlineMS: -4}, TimeoutMS: -5}},
			Op{Kind: OpEnqueue, ID: 1, Spec: &Spec{Policy: retry.Policy{Attempts: -1, BaseMS: -2, CapMS: -3, DeadlineMS: -4}, TimeoutMS: -5}}},
		{"fields a kind does not use are dropped", Op{Kind: OpDefer, ID: 3, Due: 9, Error: "x", Attempt: 4, Class: retry.Success}, Op{Kind: OpDefer, ID: 3, Due: 9}},
		{"extreme times", Op{Kind: OpRetry, ID: 1, At: -1 << 63, Due: 1<<63 - 1}, Op{Kind: OpRetry, ID: 1, At: -1 << 63, Due: 1<<63 - 1}},
		{"max attempt", Op{Kind: OpStart, ID: 1, Attempt: 1<<32 - 1}, Op{Kind: OpStart, ID: 1, Attempt: 1<<32 - 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := Encode(nil, &tt.op)
			got, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if d := opDiff(got, tt.want); d != "" {
				t.Fatal(d)
			}
			if again := Encode(nil, &got); !bytes.Equal(again, b) {
				t.Fatalf("re-encoding changed the bytes: % x vs % x", again, b)
			}
		})
	}
}

func TestKindString(t *testing.T) {
	t.Parallel()
	want := []string{"kind(0)", "enqueue", "start", "succeed", "fail", "requeue", "defer", "cancel", "retry", "expire", "queue", "snooze"}
	if got := Kind(200).String(); got != "kind(200)" {
		t.Errorf("Kind(200).String() = %q", got)
	}
	for k, w := range want {
		if got := Kind(k).String(); got != w {
			t.Errorf("Kind(%d).String() = %q, want %q", k, got, w)
		}
	}
	if got := OpLimit.String(); got != "limit" {
		t.Errorf("OpLimit.String() = %q, want limit", got)
	}
}

// opDiff returns "" when a and b are the same op (nil and empty byte
// slices are the same), else a description of the difference.
func opDiff(a, b Op) string {
	sa, sb := a.Spec, b.Spec
	a.Spec, b.Spec = nil, nil
	oa, ob := a.Output, b.Output
	if a.Kind != b.Kind || a.ID != b.ID || a.At != b.At || a.Due != b.Due || a.Attempt != b.Attempt ||
		a.Class != b.Class || a.BreakerFailed != b.BreakerFailed || a.Error != b.Error || !bytes.Equal(oa, ob) ||
		a.HoldUntil != b.HoldUntil || a.Target != b.Target || a.Limit != b.Limit {
		return fmt.Sprintf("%+v (output %q) vs %+v (output %q)", a, oa, b, ob)
	}
	if (a.Queue == nil) != (b.Queue == nil) || (a.Queue != nil && *a.Queue != *b.Queue) {
		return fmt.Sprintf("queue %+v vs %+v", a.Queue, b.Queue)
	}
	if (sa == nil) != (sb == nil) || (sa != nil && !specEqual(sa, sb)) {
		return fmt.Sprintf("spec %+v vs %+v", sa, sb)
	}
	if (a.Image == nil) != (b.Image == nil) {
		return fmt.Sprintf("image %v vs %v", a.Image != nil, b.Image != nil)
	}
	if a.Image != nil {
		if d := jobDiff(a.Image, b.Image); d != "" {
			return "image: " + d
		}
	}
	return ""
}

// FuzzDecode feeds arbitrary bytes to Decode: it must never panic, and
// every record it accepts must encode back to exactly the same bytes.
func FuzzDecode(f *testing.F) {
	for _, g := range goldenOps() {
		f.Add(Encode(nil, &g.op))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		op, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrBadOp) {
				t.Fatalf("Decode error %v does not wrap ErrBadOp", err)
			}
			return
		}
		if again := Encode(nil, &op); !bytes.Equal(again, b) {
			t.Fatalf("Decode accepted % x but it encodes back to % x", b, again)
		}
		// Applying any decodable op to a small state must not panic and
		// must keep the invariants.
		s := New(Config{Circuit: retry.DefaultCircuit()})
		for _, g := range goldenOps()[:3] {
			s.Apply(&g.op)
		}
		s.Apply(&op)
		if err := s.Check(); err != nil {
			t.Fatalf("after %+v: %v", op, err)
		}
	})
}

// TestStoredValuesFrozen pins the values of the enumerations that records
// and snapshots store as bytes (JobState in a snapshot's jobs,
// BreakerState in its breakers, Class in an outcome record): renumbering
// one would make every journal and snapshot on disk mean something else.
func TestStoredValuesFrozen(t *testing.T) {
	t.Parallel()
	states := []JobState{Pending, Running, Succeeded, Failed, Cancelled}
	for want, st := range states {
		if int(st) != want {
			t.Errorf("JobState %v is %d, stored as %d", st, st, want)
		}
	}
	for want, st := range []retry.BreakerState{retry.Closed, retry.Open, retry.HalfOpen} {
		if int(st) != want {
			t.Errorf("BreakerState %v is %d, stored as %d", st, st, want)
		}
	}
	for i, c := range []retry.Class{retry.Success, retry.Retryable, retry.Permanent, retry.Unsafe} {
		if int(c) != i+1 {
			t.Errorf("Class %v is %d, stored as %d", c, c, i+1)
		}
	}
	// The byte after a snapshot job's id is its state.
	s := New(Config{})
	s.Apply(&Op{Kind: OpEnqueue, ID: 1, Spec: &Spec{Kind: "k"}})
	s.Apply(&Op{Kind: OpCancel, ID: 1})
	j, _ := s.Job(1)
	if b := appendSnapshotJob(nil, j); len(b) < 2 || b[1] != 4 {
		t.Errorf("a cancelled job's snapshot record starts % x, want its state byte 4 after the id", b[:min(len(b), 4)])
	}
}

// TestOpCodesFrozen pins each op kind to its code in the record format:
// a rename (OpRetry became OpRequeue and OpRevive became OpRetry) must
// never move a code, or old journals would replay as other ops.
func TestOpCodesFrozen(t *testing.T) {
	for k, want := range map[Kind]byte{OpEnqueue: 1, OpStart: 2, OpSucceed: 3, OpFail: 4, OpRequeue: 5, OpDefer: 6, OpCancel: 7, OpRetry: 8, OpExpire: 9, OpQueue: 10, OpSnooze: 11, OpLimit: 12, OpSchedule: 13, OpDiscard: 14, OpTarget: 16} {
		if byte(k) != want {
			t.Errorf("%v has code %d; its code is %d, frozen by the journal format", k, byte(k), want)
		}
	}
}
