package main

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// waitDeliveries waits until st has counted want deliveries, d has passed or
// ctx ends, checking every 10 ms.
func waitDeliveries(ctx context.Context, st *stats, want int64, d time.Duration) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for st.received.Load() < want {
		select {
		case <-deadline.C:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// reportLast prints the deliveries counted against want and the time from
// the events' "at" stamp (publish on the owner) to the last delivery: for one
// broadcast, its time to last delivery.
func (s *stats) reportLast(want int64) {
	d := s.all()
	last := time.Duration(0)
	if len(d) > 0 {
		last = slices.Max(d)
	}
	fmt.Printf("expected deliveries: %d of %d; last delivery %v after the event's stamp; %d sockets lost their connection after joining\n",
		s.received.Load(), want, last.Round(10*time.Microsecond), s.closed.Load())
}
