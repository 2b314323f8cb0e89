package session

import "time"

// Clock tells local time to the renewer (its monotonic lease deadline) and to
// the actor (its idle timer). Production uses SystemClock; tests inject a
// clock they advance by hand so orderings are forced without sleeping.
//
// Now must carry a monotonic reading (or only move forward): the Manager
// only ever subtracts two readings of Now, never compares them with another
// machine's clock.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once, d after Now.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer from a Clock.
type Timer interface {
	// C delivers one value when the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it stopped the
	// timer before it fired.
	Stop() bool
}

// SystemClock returns the Clock of the time package (time.Now carries a
// monotonic reading).
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }
