package journal_test

import (
	"fmt"
	"log"
	"os"

	"github.com/runlog/runlog/internal/journal"
)

// Appending records durably and replaying them after a restart.
func Example() {
	dir, err := os.MkdirTemp("", "journal-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	j, err := journal.Open(dir, journal.Options{SegmentSize: 1 << 20})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := j.Append([]byte("enqueue job-1")); err != nil { // durable on return
		log.Fatal(err)
	}
	if _, err := j.AppendBatch([][]byte{[]byte("start job-1"), []byte("succeed job-1")}); err != nil {
		log.Fatal(err)
	}
	j.Close()

	j, err = journal.Open(dir, journal.Options{SegmentSize: 1 << 20})
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()
	err = j.Replay(0, func(pos journal.Position, rec []byte) error {
		fmt.Printf("%d %s\n", pos.Seq, rec)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// 1 enqueue job-1
	// 2 start job-1
	// 3 succeed job-1
}
