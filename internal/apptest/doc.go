// Package apptest builds the appliance binary for tests and benchmarks that
// run it as a separate process, exactly as `make build` ships it.
package apptest
