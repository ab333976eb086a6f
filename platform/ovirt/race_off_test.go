//go:build !race

package ovirt

const raceDetector = false
