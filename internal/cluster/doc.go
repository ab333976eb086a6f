// Package cluster owns the cluster model every service reads: the validated
// configuration (from appliance.yaml or the installer's install-config.yaml,
// and written back as appliance.yaml by Marshal through the same schema),
// the VRRP router IDs derived from the cluster name, and State, the live view
// of members and VIP ownership that services publish to and subscribe on.
//
// It imports no other package of this project, so every service can depend on
// it without depending on each other.
package cluster
