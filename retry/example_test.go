package retry_test

import (
	"fmt"

	"github.com/runlog/runlog/retry"
)

// A job with three attempts and a breaker that opens after two failures:
// the caller owns the clock and the random source.
func Example() {
	p := retry.Policy{Attempts: 3, BaseMS: 500, CapMS: 30000}
	c := retry.Circuit{Threshold: 2, WindowMS: 10000, CooldownMS: 1000, Probes: 1}
	var br retry.Breaker
	now, fails := int64(1_700_000_000_000), 0
	for {
		var b retry.Budget
		var deny retry.Deny
		br, b, deny = retry.Admit(br, c, retry.BudgetFor(p, fails, 1_700_000_000_000), now)
		if deny != retry.DenyNone {
			fmt.Println("denied:", deny)
			return
		}
		// The attempt runs and fails with a retryable error.
		br = br.Done(c, now, retry.Retryable.BreakerFailed())
		wait, stop := retry.PlanAfter(retry.Retryable, -1, p, b, fails, now, 0)
		fails++
		fmt.Printf("attempt %d failed; breaker %v; ", fails, br.State)
		if stop {
			fmt.Println("gave up")
			return
		}
		fmt.Printf("retry in %d ms\n", wait)
		now += wait
	}
	// Output:
	// attempt 1 failed; breaker closed; retry in 250 ms
	// attempt 2 failed; breaker open; retry in 500 ms
	// denied: open
}
