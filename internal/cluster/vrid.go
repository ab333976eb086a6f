package cluster

// Fletcher8 is the 8-bit Fletcher-style checksum OpenShift's on-prem
// networking uses to derive VRRP router IDs from the cluster name: two 4-bit
// running sums modulo 15, the second in the high nibble. The sums are taken in
// uint8 arithmetic (so a byte above 240 wraps before the modulo), exactly as
// keepalived's configuration on OpenShift nodes is produced; that is what
// makes the VRIDs agree with keepalived peers. The result is at most 0xEE.
func Fletcher8(s string) uint8 {
	var a, b uint8
	for i := 0; i < len(s); i++ {
		a = (a + s[i]) % 0xf
		b = (b + a) % 0xf
	}
	return b<<4 | a
}

// DeriveVRIDs returns the API and ingress virtual router IDs OpenShift uses
// for a cluster: Fletcher8(name+"-api")+1 and Fletcher8(name+"-ingress")+1.
// The +1 keeps 0 (invalid) out; since Fletcher8 never exceeds 238 the result
// is 1..239. When both collide the ingress ID is bumped by one, once.
func DeriveVRIDs(clusterName string) (api, ingress uint8) {
	api = Fletcher8(clusterName+"-api") + 1
	ingress = Fletcher8(clusterName+"-ingress") + 1
	if ingress == api {
		ingress++
	}
	return api, ingress
}
