// Package storetest holds contract suites for the session stores. Each suite
// takes a factory that returns a fresh, isolated store and runs the same
// checks against every implementation (memory, Postgres, Redis), so the
// embedded mode and the cluster mode cannot drift apart.
//
// Store time passes only through the fixture's Advance func: the memory
// stores advance their manual clock, the service-backed stores shift expiry
// data in place. No suite sleeps.
package storetest
