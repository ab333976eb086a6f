// Package health owns how the appliance decides whether something it checks
// is healthy: the hysteresis that turns a stream of probe outcomes into an
// Up or Down state only after Rise or Fall consecutive agreeing results, and
// the one HTTP check (fresh connection, no redirects, no proxy) behind both
// VRRP tracking and the load balancer's backend checks. Scheduling the probes
// and acting on a change stay with the callers.
package health
