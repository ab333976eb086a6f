package bootstrap

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/ignition/v2/config/util"
	v30 "github.com/coreos/ignition/v2/config/v3_0"
	t30 "github.com/coreos/ignition/v2/config/v3_0/types"
	v31 "github.com/coreos/ignition/v2/config/v3_1"
	tr31 "github.com/coreos/ignition/v2/config/v3_1/translate"
	t31 "github.com/coreos/ignition/v2/config/v3_1/types"
	v32 "github.com/coreos/ignition/v2/config/v3_2"
	tr32 "github.com/coreos/ignition/v2/config/v3_2/translate"
	t32 "github.com/coreos/ignition/v2/config/v3_2/types"
	v33 "github.com/coreos/ignition/v2/config/v3_3"
	tr33 "github.com/coreos/ignition/v2/config/v3_3/translate"
	t33 "github.com/coreos/ignition/v2/config/v3_3/types"
	v34 "github.com/coreos/ignition/v2/config/v3_4"
	tr34 "github.com/coreos/ignition/v2/config/v3_4/translate"
	t34 "github.com/coreos/ignition/v2/config/v3_4/types"
	v35 "github.com/coreos/ignition/v2/config/v3_5"
	tr35 "github.com/coreos/ignition/v2/config/v3_5/translate"
	t35 "github.com/coreos/ignition/v2/config/v3_5/types"
	v36 "github.com/coreos/ignition/v2/config/v3_6"
	tr36 "github.com/coreos/ignition/v2/config/v3_6/translate"
	"github.com/coreos/vcontext/report"

	"appliance/internal/cluster"
)

// IgnitionMediaType is the media type Ignition asks for in its Accept
// header, with a version parameter naming the spec it reads.
const IgnitionMediaType = "application/vnd.coreos.ignition+json"

// ConfigServer serves Ignition configs the way the Machine Config Server
// does (GET /config/<role> over HTTPS), for a config too large for the
// platform's own channel: the VM is given a small pointer config (see
// Pointer) that replaces itself with the served one. Its certificate is
// signed by a CA generated when it starts, which the pointer carries.
type ConfigServer struct {
	// URL is https://host:port, as the VMs reach it.
	URL string
	// CA is the PEM certificate of the generated CA.
	CA []byte

	configs map[cluster.Role][]byte
	log     *slog.Logger
	srv     *http.Server
	ln      net.Listener
	done    chan struct{}

	mu      sync.Mutex
	fetched map[cluster.Role]int
	served  chan struct{} // closed by a fetch, replaced afterwards
}

// ServeConfigs listens on addr (host:port, the host being the address or
// name the VMs reach; port 0 picks one) and serves configs, each a valid
// Ignition config of its role, until Close. addr's host goes into the
// certificate, so it must be what the pointer's URL names: not 0.0.0.0.
// Every answer, and every refused TLS handshake (a VM with another run's
// CA), is logged to log; nil logs nothing.
func ServeConfigs(addr string, configs map[cluster.Role][]byte, log *slog.Logger) (*ConfigServer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("serve ignition: %q is not host:port: %w", addr, err)
	}
	if ip, err := netip.ParseAddr(host); host == "" || (err == nil && ip.IsUnspecified()) {
		return nil, fmt.Errorf("serve ignition: %q: give the address the VMs reach this machine at (e.g. 192.168.126.1:22624), not an unspecified one: it is the pointer's URL", addr)
	}
	for role, raw := range configs {
		if _, _, err := util.GetConfigVersion(raw); err != nil {
			return nil, fmt.Errorf("serve ignition: the %s config: %w", role, err)
		}
	}
	caPEM, cert, err := selfSigned(host)
	if err != nil {
		return nil, fmt.Errorf("serve ignition: certificates: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serve ignition: listen on %s: %w (the address must be one of this machine's)", addr, err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	s := &ConfigServer{
		URL: "https://" + net.JoinHostPort(host, port), CA: caPEM,
		configs: configs, ln: ln, done: make(chan struct{}), log: log,
		fetched: map[cluster.Role]int{}, served: make(chan struct{}),
	}
	s.srv = &http.Server{
		Handler:           s,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() {
		defer close(s.done)
		s.srv.ServeTLS(ln, "", "")
	}()
	return s, nil
}

// Close stops the server, letting requests under way finish for a few
// seconds.
func (s *ConfigServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}

// ConfigURL is where role's config is served.
func (s *ConfigServer) ConfigURL(role cluster.Role) string { return s.URL + "/config/" + string(role) }

// Fetched says how many times role's config was served whole.
func (s *ConfigServer) Fetched(role cluster.Role) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetched[role]
}

// WaitFetched returns once every role in roles was served at least once,
// or ctx ends (its error, then).
func (s *ConfigServer) WaitFetched(ctx context.Context, roles []cluster.Role) error {
	for {
		s.mu.Lock()
		ch, all := s.served, true
		for _, r := range roles {
			all = all && s.fetched[r] > 0
		}
		s.mu.Unlock()
		if all {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// ServeHTTP answers GET /config/<role> with that role's config at the spec
// version the Accept header asks for (see Negotiate).
func (s *ConfigServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	role, ok := strings.CutPrefix(r.URL.Path, "/config/")
	raw, found := s.configs[cluster.Role(role)]
	if !ok || !found {
		http.NotFound(w, r)
		return
	}
	out, ver, err := ConfigAt(raw, Negotiate(r.Header.Get("Accept"), raw))
	if err != nil {
		s.log.Error("ignition server: cannot answer", "role", role, "from", r.RemoteAddr, "accept", r.Header.Get("Accept"), "err", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	s.log.Info("ignition server: serving", "role", role, "from", r.RemoteAddr, "version", ver, "bytes", len(out))
	w.Header().Set("Content-Type", IgnitionMediaType+";version="+ver)
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	if r.Method == http.MethodHead {
		return
	}
	if _, err := w.Write(out); err != nil {
		return
	}
	s.mu.Lock()
	s.fetched[cluster.Role(role)]++
	close(s.served)
	s.served = make(chan struct{})
	s.mu.Unlock()
}

// Negotiate picks the spec version to answer raw in, from an Accept header
// such as Ignition's "application/vnd.coreos.ignition+json;version=3.3.0,
// */*;q=0.1": the highest version asked for (q > 0) that raw can be given
// in; when none can, raw's own version, the nearest there is. With no
// version asked for, raw's own.
func Negotiate(accept string, raw []byte) string {
	have, _, err := util.GetConfigVersion(raw)
	if err != nil {
		return ""
	}
	own := have.String()
	best := -1
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || mt != IgnitionMediaType {
			continue
		}
		if q, ok := params["q"]; ok {
			if f, err := strconv.ParseFloat(q, 64); err != nil || f <= 0 {
				continue
			}
		}
		minor, ok := specMinor(params["version"])
		if !ok || minor <= best {
			continue
		}
		if _, _, err := ConfigAt(raw, Versions[minor]); err == nil {
			best = minor
		}
	}
	if best < 0 {
		return own
	}
	return Versions[best]
}

// specMinor is the index in Versions of "3.N.0" or "3.N".
func specMinor(v string) (int, bool) {
	for i, s := range Versions {
		if v == s || v+".0" == s {
			return i, true
		}
	}
	return 0, false
}

// ConfigAt is raw, a valid config, at spec version want (one of Versions;
// "" keeps raw's): translated up with the module's own translators, or, to
// an older version, read again by that version's parser, refused when it
// finds a key it does not know (the config uses something the older spec
// lacks). It returns the config and its version.
func ConfigAt(raw []byte, want string) ([]byte, string, error) {
	have, _, err := util.GetConfigVersion(raw)
	if err != nil {
		return nil, "", err
	}
	from, ok := specMinor(have.String())
	if !ok {
		return nil, "", fmt.Errorf("spec version %s is not one of %s", have.String(), strings.Join(Versions, ", "))
	}
	if want == "" {
		want = have.String()
	}
	to, ok := specMinor(want)
	if !ok {
		return nil, "", fmt.Errorf("spec version %s is not one of %s", want, strings.Join(Versions, ", "))
	}
	if to < from {
		return down(raw, to)
	}
	cfg, rpt, err := parsers[from](raw)
	if err != nil {
		return nil, "", fmt.Errorf("%w%s", err, fatalEntries(rpt))
	}
	for i := from; i < to; i++ {
		cfg = upgrades[i](cfg)
	}
	out, err := json.Marshal(cfg)
	return out, Versions[to], err
}

// down re-reads raw as spec Versions[to]: the later specs only add fields,
// so a config using none of them reads the same; one that does is refused.
func down(raw []byte, to int) ([]byte, string, error) {
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, "", err
	}
	ign, _ := doc["ignition"].(map[string]any)
	if ign == nil {
		return nil, "", errors.New("no ignition section")
	}
	ign["version"] = Versions[to]
	// The module's types marshal absent sections as {} (kernelArguments,
	// proxy): empty, they mean nothing, and an older parser would not know
	// them.
	prune(doc)
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, "", err
	}
	cfg, rpt, err := parsers[to](b)
	if err != nil {
		return nil, "", fmt.Errorf("not expressible in spec %s: %w%s", Versions[to], err, fatalEntries(rpt))
	}
	for _, en := range rpt.Entries {
		if en.Kind != report.Info {
			return nil, "", fmt.Errorf("not expressible in spec %s: %s: %s", Versions[to], en.Context.String(), en.Message)
		}
	}
	out, err := json.Marshal(cfg)
	return out, Versions[to], err
}

// prune drops the empty objects and lists under m, depth first.
func prune(m map[string]any) {
	for k, v := range m {
		switch v := v.(type) {
		case map[string]any:
			prune(v)
			if len(v) == 0 {
				delete(m, k)
			}
		case []any:
			for _, e := range v {
				if em, ok := e.(map[string]any); ok {
					prune(em)
				}
			}
			if len(v) == 0 {
				delete(m, k)
			}
		case nil:
			delete(m, k)
		}
	}
}

func fatalEntries(r report.Report) string {
	var b strings.Builder
	for _, en := range r.Entries {
		if en.Kind.IsFatal() {
			fmt.Fprintf(&b, "\n  %s: %s", en.Context.String(), en.Message)
		}
	}
	return b.String()
}

// parsers[i] parses spec Versions[i] into its own types.
var parsers = []func([]byte) (any, report.Report, error){
	func(b []byte) (any, report.Report, error) { return v30.Parse(b) },
	func(b []byte) (any, report.Report, error) { return v31.Parse(b) },
	func(b []byte) (any, report.Report, error) { return v32.Parse(b) },
	func(b []byte) (any, report.Report, error) { return v33.Parse(b) },
	func(b []byte) (any, report.Report, error) { return v34.Parse(b) },
	func(b []byte) (any, report.Report, error) { return v35.Parse(b) },
	func(b []byte) (any, report.Report, error) { return v36.Parse(b) },
}

// upgrades[i] translates a config of Versions[i] to Versions[i+1].
var upgrades = []func(any) any{
	func(c any) any { return tr31.Translate(c.(t30.Config)) },
	func(c any) any { return tr32.Translate(c.(t31.Config)) },
	func(c any) any { return tr33.Translate(c.(t32.Config)) },
	func(c any) any { return tr34.Translate(c.(t33.Config)) },
	func(c any) any { return tr35.Translate(c.(t34.Config)) },
	func(c any) any { return tr36.Translate(c.(t35.Config)) },
}

// Pointer is the small config a VM is given instead of role's: at the same
// spec version, it replaces itself with the served config
// (ignition.config.replace) and trusts the generated CA
// (ignition.security.tls.certificateAuthorities, as a data URL).
func (s *ConfigServer) Pointer(role cluster.Role) ([]byte, error) {
	raw, ok := s.configs[role]
	if !ok {
		return nil, fmt.Errorf("serve ignition: no %s config is served", role)
	}
	have, _, err := util.GetConfigVersion(raw)
	if err != nil {
		return nil, err
	}
	to, ok := specMinor(have.String())
	if !ok {
		return nil, fmt.Errorf("serve ignition: the %s config's spec version %s is not one of %s", role, have.String(), strings.Join(Versions, ", "))
	}
	// Built in 3.0.0's types, then translated by the module to the
	// config's own version, which the VM's Ignition is known to read.
	var p any = t30.Config{Ignition: t30.Ignition{
		Version: Versions[0],
		Config:  t30.IgnitionConfig{Replace: t30.ConfigReference{Source: ptr(s.ConfigURL(role))}},
		Security: t30.Security{TLS: t30.TLS{CertificateAuthorities: []t30.CaReference{
			{Source: "data:;base64," + base64.StdEncoding.EncodeToString(s.CA)},
		}}},
	}}
	for i := 0; i < to; i++ {
		p = upgrades[i](p)
	}
	out, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	if _, rpt, err := parsers[to](out); err != nil {
		return nil, fmt.Errorf("serve ignition: pointer config: %w%s", err, fatalEntries(rpt))
	}
	return out, nil
}

// selfSigned makes a CA and a server certificate for host signed by it,
// both valid for a week: long enough for any install, and of no use after.
func selfSigned(host string) (caPEM []byte, cert tls.Certificate, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, cert, err
	}
	now := time.Now().Add(-time.Hour) // a VM clock slightly behind still accepts it
	serial := func() *big.Int {
		n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
		return n
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "appliance provision ignition CA"},
		NotBefore:             now,
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, cert, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, cert, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, cert, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now,
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, cert, err
	}
	cert = tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key}
	return pemCert(caDER), cert, nil
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
