package dashboard

import (
	"cmp"
	"context"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/walk"
)

// MaxGroupScan is how many failed jobs, the newest first, the failed page
// groups (and a group action acts on): grouping reads that many jobs at
// most, whatever the history holds, and the page says so when more match.
const MaxGroupScan = 2000

// The parts of a reason that differ from one job to the next, replaced so
// that jobs that failed the same way share a group. HTTP statuses are kept:
// a 400 and a 503 are not the same failure.
var (
	reURL     = regexp.MustCompile(`\b[a-z][a-z0-9+.-]*://[^\s"'<>]*[^\s"'<>.,:;)]`)
	reUUID    = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	reIPv6    = regexp.MustCompile(`\[[0-9a-fA-F:.]+\](:\d+)?`)
	reIPv4    = regexp.MustCompile(`\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b`)
	reHex     = regexp.MustCompile(`(?i)\b(0x)?[0-9a-f]{8,}\b`)
	reHTTP    = regexp.MustCompile(`\bHTTP (\d{3})\b`)
	reNumber  = regexp.MustCompile(`\d+(\.\d+)?`)
	reSpaces  = regexp.MustCompile(`\s+`)
	keepToken = "\x00"
)

// normalizeReason reduces a failure reason to its shape: URLs, ids,
// addresses and numbers replaced by <url>, <id>, <addr> and <n>; an HTTP
// status stays.
func normalizeReason(s string) string {
	if len(s) > 1000 {
		s = s[:1000]
	}
	// Each pattern runs only when its mark is there: most reasons have
	// no URL, UUID or IPv6 address, and the regexps cost more than the
	// rest of the page (BenchmarkPages/failed).
	if strings.Contains(s, "://") {
		s = reURL.ReplaceAllString(s, "<url>")
	}
	if strings.Count(s, "-") >= 4 {
		s = reUUID.ReplaceAllString(s, "<id>")
	}
	if strings.Contains(s, "[") {
		s = reIPv6.ReplaceAllString(s, "<addr>")
	}
	if strings.Count(s, ".") >= 3 {
		s = reIPv4.ReplaceAllString(s, "<addr>")
	}
	if hexRun(s) {
		s = reHex.ReplaceAllStringFunc(s, func(m string) string {
			if !strings.ContainsAny(m, "0123456789") || !strings.ContainsAny(strings.ToLower(m), "abcdef") {
				return m // a word ("deadbeef"), or a number (below)
			}
			return "<id>"
		})
	}
	if strings.ContainsAny(s, "0123456789") {
		if strings.Contains(s, "HTTP ") {
			s = reHTTP.ReplaceAllString(s, "HTTP "+keepToken+"$1"+keepToken)
		}
		s = replaceOutside(s, reNumber, "<n>")
		s = strings.ReplaceAll(s, keepToken, "")
	}
	s = strings.TrimSpace(reSpaces.ReplaceAllString(s, " "))
	if s == "" {
		return "(no reason)"
	}
	return s
}

// hexRun reports whether s has a run of at least 8 hexadecimal digits
// (a candidate for reHex).
func hexRun(s string) bool {
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20
		if (s[i] >= '0' && s[i] <= '9') || (c >= 'a' && c <= 'f') {
			if n++; n >= 8 {
				return true
			}
			continue
		}
		n = 0
	}
	return false
}

// replaceOutside replaces the matches of re in s with repl, except within
// keepToken pairs.
func replaceOutside(s string, re *regexp.Regexp, repl string) string {
	parts := strings.Split(s, keepToken)
	for i := 0; i < len(parts); i += 2 {
		parts[i] = re.ReplaceAllString(parts[i], repl)
	}
	return strings.Join(parts, keepToken)
}

// group is one row of a grouping: the jobs sharing a key.
type group struct {
	Key     string
	Count   int
	Example uint64    // the newest job of the group
	Last    time.Time // when its newest job failed
}

// groupsData is the failed page's triage: the newest failed jobs (up to
// MaxGroupScan) grouped by reason, kind and target.
type groupsData struct {
	Reasons, Kinds, Targets []group
	Scanned                 int  // failed jobs grouped
	More                    bool // more failed jobs match than were grouped
}

// failedJobs calls fn for the newest failed jobs that match f (its state
// set to failed), at most MaxGroupScan of them, and reports whether more
// match.
func (h *handler) failedJobs(ctx context.Context, f filter, fn func(runlog.Job)) (more bool, err error) {
	f.State, f.After, f.Oldest = string(runlog.StateFailed), 0, false
	return walk.Walk(ctx, MaxGroupScan, func(ctx context.Context, after uint64, limit int) ([]runlog.Job, uint64, error) {
		f.After = after
		page, err := h.runner.List(ctx, f.list(limit))
		return page.Jobs, page.Next, err
	}, func(j runlog.Job) bool { fn(j); return true })
}

// groupFailed groups the newest failed jobs matching f.
func (h *handler) groupFailed(ctx context.Context, f filter) (groupsData, error) {
	reasons, kinds, targets := map[string]*group{}, map[string]*group{}, map[string]*group{}
	var d groupsData
	// Reasons repeat (one failure, many jobs): each is normalized once.
	norm := map[string]string{}
	add := func(m map[string]*group, key string, j runlog.Job) {
		g := m[key]
		if g == nil {
			g = &group{Key: key, Example: j.ID, Last: j.FinishedAt}
			m[key] = g
		}
		g.Count++
	}
	more, err := h.failedJobs(ctx, f, func(j runlog.Job) {
		d.Scanned++
		key, ok := norm[j.Reason]
		if !ok {
			key = normalizeReason(j.Reason)
			norm[j.Reason] = key
		}
		add(reasons, key, j)
		add(kinds, j.Kind, j)
		add(targets, j.Target, j)
	})
	if err != nil {
		return groupsData{}, err
	}
	d.More = more
	d.Reasons, d.Kinds, d.Targets = sortedGroups(reasons), sortedGroups(kinds), sortedGroups(targets)
	return d, nil
}

// sortedGroups lists m's groups, the largest first (ties in natural order).
func sortedGroups(m map[string]*group) []group {
	out := make([]group, 0, len(m))
	for _, g := range m {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b group) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return naturalCompare(a.Key, b.Key)
	})
	return out
}

// naturalCompare orders strings with their digit runs compared as numbers:
// "host2" before "host10".
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digitRun(a), digitRun(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			if c := cmp.Compare(da, db); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

// digitRun is the length of the run of ASCII digits s starts with.
func digitRun(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// liveBreaker returns t as it stands at now: a breaker whose cooldown ended
// lets the next attempt through as a probe, so it reads as half-open, not
// "open until" a time already past.
func liveBreaker(t runlog.TargetStats, now time.Time) runlog.TargetStats {
	if t.State == "open" && !t.OpenUntil.After(now) {
		t.State = "half-open"
	}
	return t
}
