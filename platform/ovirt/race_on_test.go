//go:build race

package ovirt

const raceDetector = true
