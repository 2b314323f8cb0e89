//go:build race

package chaos

// raceEnabled builds the gateway under test with the race detector too.
const raceEnabled = true
