// Package admin owns the one admin HTTP listener of an appliance process:
// /healthz, /readyz, /metrics (Prometheus) and /status (JSON). Services do not
// import it; cmd/appliance hands it a registry and the functions it serves.
package admin
