package report

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/runlog/runlog/bench/internal/harness"
)

// Machine describes where the benchmark ran.
type Machine struct {
	Date      string `json:"date"`
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model"`
	Memory    string `json:"memory"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
	// Disk is the filesystem that holds the data directories.
	Disk string `json:"disk"`
	// FsyncP50Micros and FsyncP99Micros time one 4 KiB write plus
	// fdatasync on that filesystem: the floor under every durable commit.
	FsyncP50Micros float64 `json:"fsync_p50_us"`
	FsyncP99Micros float64 `json:"fsync_p99_us"`
	// Modules are the Go modules of the systems under test, with versions.
	Modules []harness.Setting `json:"modules"`
}

// modulePrefixes select the modules worth naming in the report.
var modulePrefixes = []string{
	"github.com/riverqueue/river", "github.com/jackc/pgx", "modernc.org/sqlite",
	"maragu.dev/goqite", "github.com/hibiken/asynq", "github.com/redis/go-redis",
}

// Describe gathers the machine's description; dir is where the data
// directories live (the fsync probe writes a file there).
func Describe(dir string) Machine {
	m := Machine{
		Date:      time.Now().UTC().Format(time.RFC3339),
		CPUs:      runtime.NumCPU(),
		GoVersion: runtime.Version(),
		CPUModel:  firstField("/proc/cpuinfo", "model name"),
	}
	if kb, err := strconv.ParseInt(strings.TrimSuffix(firstField("/proc/meminfo", "MemTotal"), " kB"), 10, 64); err == nil {
		m.Memory = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command("df", "-hT", dir).Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		m.Disk = strings.Join(strings.Fields(lines[len(lines)-1]), " ") + " (filesystem, type, size, used, avail, use%, mount)"
	}
	m.FsyncP50Micros, m.FsyncP99Micros = fsyncProbe(dir, 200)
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			for _, p := range modulePrefixes {
				if strings.HasPrefix(d.Path, p) {
					m.Modules = append(m.Modules, harness.Setting{Name: d.Path, Value: d.Version})
					break
				}
			}
		}
	}
	return m
}

// firstField returns the value of the first "key : value" line of a
// /proc file.
func firstField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// fsyncProbe times n writes of 4 KiB each followed by fdatasync and
// returns the median and 99th percentile in microseconds.
func fsyncProbe(dir string, n int) (p50, p99 float64) {
	f, err := os.CreateTemp(dir, "fsync-probe-")
	if err != nil {
		return 0, 0
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := bytes.Repeat([]byte{'x'}, 4096)
	times := make([]int64, 0, n)
	for range n {
		start := time.Now()
		if _, err := f.Write(buf); err != nil {
			return 0, 0
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return 0, 0
		}
		times = append(times, time.Since(start).Microseconds())
	}
	slices.Sort(times)
	return float64(harness.Percentile(times, 0.5)), float64(harness.Percentile(times, 0.99))
}

// ReadResults reads a results file written by "benchrun all". For a
// configuration and workload that appear more than once, the last wins.
func ReadResults(path string) ([]harness.Result, error) {
	b, err := os.ReadFile(filepath.Clean(path))
	if err != nil {
		return nil, err
	}
	var out []harness.Result
	for i, line := range bytes.Split(b, []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var r harness.Result
		if err := jsonUnmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, i+1, err)
		}
		out = append(out, r)
	}
	return out, nil
}
