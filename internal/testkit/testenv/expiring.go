package testenv

import (
	"context"
	"sync"
)

// ExpiringContext is a context whose deadline passes when the test says so
// (Expire), not on a clock: Done closes and Err becomes
// context.DeadlineExceeded. Values and the parent's own cancellation are
// not followed; it stands for "the caller's deadline ran out here" at a
// point a test forces.
type ExpiringContext struct {
	context.Context
	done chan struct{}
	once sync.Once
}

// NewExpiringContext returns an ExpiringContext over parent.
func NewExpiringContext(parent context.Context) *ExpiringContext {
	return &ExpiringContext{Context: parent, done: make(chan struct{})}
}

// Expire makes the deadline pass; later calls do nothing.
func (c *ExpiringContext) Expire() { c.once.Do(func() { close(c.done) }) }

// Done is closed by Expire.
func (c *ExpiringContext) Done() <-chan struct{} { return c.done }

// Err is context.DeadlineExceeded after Expire, nil before.
func (c *ExpiringContext) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
