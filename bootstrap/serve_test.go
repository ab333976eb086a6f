package bootstrap

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v33 "github.com/coreos/ignition/v2/config/v3_3"
	"github.com/vincent-petithory/dataurl"

	"appliance/internal/cluster"
)

// servedConfig is a bootstrap config at spec v with the appliance's files
// and one of the installer's, padded by a file of pad random bytes.
func servedConfig(t *testing.T, v string, pad int) ([]byte, []File) {
	t.Helper()
	big := make([]byte, pad)
	rand.Read(big)
	own := File{Path: "/etc/installer-file", Mode: 0o640, Contents: big}
	raw := fmt.Appendf(nil, `{"ignition":{"version":%q},"storage":{"files":[{"path":%q,"mode":%d,"contents":{"source":"data:;base64,%s"}}]}}`,
		v, own.Path, own.Mode, base64.StdEncoding.EncodeToString(own.Contents))
	files, err := Files(mustParse(t, testConfigYAML), cluster.RoleBootstrap, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	m, err := Merge("bootstrap.ign", raw, files)
	if err != nil {
		t.Fatal(err)
	}
	return m.Config, append(files, own)
}

const luks32 = `{"ignition":{"version":"3.2.0"},"storage":{"luks":[{"name":"root","device":"/dev/vda4","clevis":{"tpm2":true}}]}}`

func TestNegotiate(t *testing.T) {
	plain := []byte(`{"ignition":{"version":"3.2.0"},"storage":{"files":[{"path":"/etc/x","contents":{"source":"data:,x"}}]}}`)
	for _, tc := range []struct {
		name, accept string
		raw          []byte
		want         string
	}{
		{"no header: its own", "", plain, "3.2.0"},
		{"anything: its own", "*/*", plain, "3.2.0"},
		{"Ignition 2.14's header: up to 3.3.0", IgnitionMediaType + ";version=3.3.0, */*;q=0.1", plain, "3.3.0"},
		{"short version", IgnitionMediaType + ";version=3.4", plain, "3.4.0"},
		{"the highest of several", IgnitionMediaType + ";version=3.1.0, " + IgnitionMediaType + ";version=3.5.0", plain, "3.5.0"},
		{"q=0 is refused", IgnitionMediaType + ";version=3.5.0;q=0, " + IgnitionMediaType + ";version=3.3.0", plain, "3.3.0"},
		{"down when nothing is lost", IgnitionMediaType + ";version=3.1.0", plain, "3.1.0"},
		{"not down when a field is lost: the nearest", IgnitionMediaType + ";version=3.1.0", []byte(luks32), "3.2.0"},
		{"unknown version ignored", IgnitionMediaType + ";version=4.0.0", plain, "3.2.0"},
		{"other media types ignored", "application/json;version=3.4.0", plain, "3.2.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Negotiate(tc.accept, tc.raw); got != tc.want {
				t.Errorf("Negotiate(%q) = %s, want %s", tc.accept, got, tc.want)
			}
		})
	}
}

// TestConfigAtEveryVersion: a config of every version is given in every
// other it can be, and the module's parser of that version reads it back
// without a warning, the appliance's files still in it.
func TestConfigAtEveryVersion(t *testing.T) {
	for _, from := range Versions {
		raw, want := servedConfig(t, from, 16)
		for _, to := range Versions {
			out, ver, err := ConfigAt(raw, to)
			if err != nil {
				t.Errorf("%s -> %s: %v", from, to, err)
				continue
			}
			if ver != to || versionOf(t, out) != to {
				t.Errorf("%s -> %s: got %s (%s)", from, to, ver, versionOf(t, out))
			}
			got := ours(t, out)
			for _, f := range want {
				if Owned(f.Path) && got[f.Path].Path == "" {
					t.Errorf("%s -> %s: %s lost", from, to, f.Path)
				}
			}
		}
	}
	if _, _, err := ConfigAt([]byte(luks32), "3.1.0"); err == nil || !strings.Contains(err.Error(), "luks") {
		t.Errorf("luks down to 3.1.0: %v, want it refused naming the field", err)
	}
}

// client trusts only the CA the pointer carries, read back from it.
func client(t *testing.T, pointer []byte) *http.Client {
	t.Helper()
	cfg, _, err := v33.ParseCompatibleVersion(pointer)
	if err != nil {
		t.Fatalf("pointer: %v\n%s", err, pointer)
	}
	cas := cfg.Ignition.Security.TLS.CertificateAuthorities
	if len(cas) != 1 || cas[0].Source == nil {
		t.Fatalf("pointer CAs %+v", cas)
	}
	du, err := dataurl.DecodeString(*cas[0].Source)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(du.Data) {
		t.Fatalf("no certificate in the pointer's CA %q", du.Data)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// TestConfigServer: a Go client trusting only the pointer's CA fetches the
// config over TLS, in the version its Accept header asks for, with the
// media type saying so; one trusting the system's roots is refused.
func TestConfigServer(t *testing.T) {
	raw, _ := servedConfig(t, "3.2.0", 2<<20) // over the 1 MiB a platform carries
	s, err := ServeConfigs("127.0.0.1:0", map[cluster.Role][]byte{cluster.RoleBootstrap: raw}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pointer, err := s.Pointer(cluster.RoleBootstrap)
	if err != nil {
		t.Fatal(err)
	}
	if versionOf(t, pointer) != "3.2.0" || len(pointer) > 4096 {
		t.Errorf("pointer (%d bytes) at %s, want a small one at 3.2.0:\n%s", len(pointer), versionOf(t, pointer), pointer)
	}
	if !bytes.Contains(pointer, []byte(`"replace":{"source":"`+s.URL+`/config/bootstrap"`)) {
		t.Errorf("pointer does not replace itself with %s/config/bootstrap:\n%s", s.URL, pointer)
	}
	c := client(t, pointer)
	get := func(path, accept string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", s.URL+path, nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, body
	}
	resp, body := get("/config/bootstrap", IgnitionMediaType+";version=3.3.0, */*;q=0.1")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != IgnitionMediaType+";version=3.3.0" || versionOf(t, body) != "3.3.0" {
		t.Errorf("got %s, %q, version %s; want 200 and 3.3.0", resp.Status, resp.Header.Get("Content-Type"), versionOf(t, body))
	}
	if _, _, err := v33.Parse(body); err != nil {
		t.Errorf("served config: %v", err)
	}
	if resp, body = get("/config/bootstrap", ""); versionOf(t, body) != "3.2.0" || resp.Header.Get("Content-Type") != IgnitionMediaType+";version=3.2.0" {
		t.Errorf("without Accept: %q, version %s, want its own 3.2.0", resp.Header.Get("Content-Type"), versionOf(t, body))
	}
	if resp, _ = get("/config/master", ""); resp.StatusCode != 404 {
		t.Errorf("a role not served: %s, want 404", resp.Status)
	}
	if n := s.Fetched(cluster.RoleBootstrap); n != 2 {
		t.Errorf("Fetched = %d, want 2", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.WaitFetched(ctx, []cluster.Role{cluster.RoleBootstrap}); err != nil {
		t.Errorf("WaitFetched: %v", err)
	}
	if _, err := http.Get(s.URL + "/config/bootstrap"); err == nil {
		t.Error("a client without the generated CA was not refused")
	}
}

func TestServeConfigsRefuses(t *testing.T) {
	raw, _ := servedConfig(t, "3.2.0", 1)
	for _, addr := range []string{"0.0.0.0:22624", ":22624", "nohost"} {
		if s, err := ServeConfigs(addr, map[cluster.Role][]byte{cluster.RoleBootstrap: raw}, nil); err == nil {
			s.Close()
			t.Errorf("%q accepted", addr)
		}
	}
	if _, err := ServeConfigs("127.0.0.1:0", map[cluster.Role][]byte{cluster.RoleBootstrap: []byte("{")}, nil); err == nil {
		t.Error("a config that is not Ignition accepted")
	}
}

// TestRealIgnitionFetchesServed: Ignition itself, given the pointer, fetches
// the served config over TLS with the generated CA and applies it: a 2 MiB
// bootstrap config arrives whole, the appliance's files with their modes.
// A 3.4.0 config, newer than Ignition 2.14 reads, is served at the 3.3.0
// its Accept header asks for (the pointer given to it at 3.3.0 too).
func TestRealIgnitionFetchesServed(t *testing.T) {
	needTool(t, ignitionBin)
	for _, v := range append(realVersions, "3.4.0") {
		t.Run(v, func(t *testing.T) {
			raw, want := servedConfig(t, v, 2<<20)
			s, err := ServeConfigs("127.0.0.1:0", map[cluster.Role][]byte{cluster.RoleBootstrap: raw}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			pointer, err := s.Pointer(cluster.RoleBootstrap)
			if err != nil {
				t.Fatal(err)
			}
			if v == "3.4.0" {
				if pointer, _, err = ConfigAt(pointer, "3.3.0"); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(t.TempDir(), "pointer.ign")
			if err := os.WriteFile(path, pointer, 0o600); err != nil {
				t.Fatal(err)
			}
			root := ignitionRoot(t)
			runIgnition(t, path, root)
			checkApplied(t, root, want)
			if s.Fetched(cluster.RoleBootstrap) == 0 {
				t.Error("the server saw no fetch")
			}
		})
	}
}
