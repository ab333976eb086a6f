//go:build !race

package apptest

// raceEnabled is true in a test binary built with -race.
const raceEnabled = false
