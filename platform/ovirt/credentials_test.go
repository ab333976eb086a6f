package ovirt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// secret is distinctive so that any leak is found by a substring search.
const secret = "pw-Z9q!LEAK-CANARY-7731 /&\"+"

// canary is the part of secret that every encoding keeps.
const canary = "LEAK-CANARY-7731"

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ovirt-config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadCredentials(t *testing.T) {
	full := "ovirt_url: https://engine.example.com/ovirt-engine/api\n" +
		"ovirt_username: admin@internal\n" +
		"ovirt_password: " + secret + "\n" +
		"ovirt_cafile: /etc/pki/ovirt-engine/ca.pem\n" +
		"ovirt_insecure: false\n"
	tests := []struct {
		name    string
		file    string // "" = no file
		env     map[string]string
		want    Credentials
		wantErr string
	}{
		{
			name: "file",
			file: full,
			want: Credentials{URL: "https://engine.example.com/ovirt-engine/api", Username: "admin@internal",
				Password: secret, CAFile: "/etc/pki/ovirt-engine/ca.pem"},
		},
		{
			name: "file with ca bundle",
			file: "ovirt_url: https://e/ovirt-engine/api\novirt_username: a@internal\novirt_password: " + secret +
				"\novirt_ca_bundle: |\n  -----BEGIN CERTIFICATE-----\n  x\n  -----END CERTIFICATE-----\n",
			want: Credentials{URL: "https://e/ovirt-engine/api", Username: "a@internal", Password: secret,
				CABundle: "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n"},
		},
		{
			name: "environment only",
			env: map[string]string{EnvURL: "https://e/ovirt-engine/api", EnvUsername: "admin@internal",
				EnvPassword: secret, EnvInsecure: "true"},
			want: Credentials{URL: "https://e/ovirt-engine/api", Username: "admin@internal", Password: secret, Insecure: true},
		},
		{
			name: "environment overrides file",
			file: full,
			env:  map[string]string{EnvUsername: "ops@corp", EnvCAFile: "/tmp/ca.pem"},
			want: Credentials{URL: "https://engine.example.com/ovirt-engine/api", Username: "ops@corp",
				Password: secret, CAFile: "/tmp/ca.pem"},
		},
		{
			name:    "bad insecure",
			env:     map[string]string{EnvURL: "https://e/api", EnvUsername: "a@b", EnvPassword: secret, EnvInsecure: "maybe"},
			wantErr: "OVIRT_INSECURE",
		},
		{
			name:    "missing password",
			env:     map[string]string{EnvURL: "https://e/api", EnvUsername: "a@b"},
			wantErr: "ovirt_password",
		},
		{
			name:    "missing url",
			env:     map[string]string{EnvUsername: "a@b", EnvPassword: secret},
			wantErr: "ovirt_url",
		},
		{
			name:    "plain http refused",
			env:     map[string]string{EnvURL: "http://e/api", EnvUsername: "a@b", EnvPassword: secret},
			wantErr: "use https://",
		},
		{
			name:    "password in the URL",
			env:     map[string]string{EnvURL: "https://admin:LEAK-CANARY-7731@e/api", EnvUsername: "a@b", EnvPassword: "other"},
			wantErr: "must not contain user:password@",
		},
		{
			name:    "username without profile",
			env:     map[string]string{EnvURL: "https://e/api", EnvUsername: "admin", EnvPassword: secret},
			wantErr: "user@profile",
		},
		{
			name: "insecure with CA is ambiguous",
			env: map[string]string{EnvURL: "https://e/api", EnvUsername: "a@b", EnvPassword: secret,
				EnvInsecure: "1", EnvCAFile: "/ca.pem"},
			wantErr: "choose one",
		},
		{
			name:    "malformed file quoting the password",
			file:    "ovirt_password: " + secret + "\n  : : [\n",
			wantErr: "not a valid ovirt-config.yaml",
		},
		{
			name:    "password of wrong type",
			file:    "ovirt_url: https://e/api\novirt_password: [" + secret + "]\n",
			wantErr: "not a valid ovirt-config.yaml",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.file != "" {
				path = writeFile(t, tt.file)
			}
			got, err := LoadCredentials(path, envMap(tt.env))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), canary) {
					t.Fatalf("error leaks the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestLoadCredentialsMissingFile(t *testing.T) {
	_, err := LoadCredentials(filepath.Join(t.TempDir(), "nope.yaml"), nil)
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("err = %v", err)
	}
}

func TestDefaultCredentialsPath(t *testing.T) {
	if got := DefaultCredentialsPath(envMap(map[string]string{"HOME": "/home/u"})); got != "/home/u/.ovirt/ovirt-config.yaml" {
		t.Fatal(got)
	}
	if got := DefaultCredentialsPath(envMap(map[string]string{"HOME": "/home/u", EnvConfig: "/x.yaml"})); got != "/x.yaml" {
		t.Fatal(got)
	}
}

func TestSecretNeverPrints(t *testing.T) {
	c := Credentials{URL: "https://e/api", Username: "a@b", Password: secret}
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("creds", "c", c, "p", c.Password)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("creds", "c", c, "p", c.Password)
	js, _ := json.Marshal(c)
	outs := []string{
		buf.String(), string(js),
		fmt.Sprintf("%v %+v %#v %s %q %x %X %10s", c, c, c, c.Password, c.Password, c.Password, c.Password, c.Password),
	}
	for _, o := range outs {
		if strings.Contains(o, canary) {
			t.Fatalf("secret printed: %s", o)
		}
	}
	if c.Password.Reveal() != secret {
		t.Fatal("Reveal")
	}
}

func TestTLSVerifiedByDefault(t *testing.T) {
	c := Credentials{URL: "https://e/api", Username: "a@b", Password: secret}
	cfg, err := c.tlsProvider().CreateTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.InsecureSkipVerify || cfg.RootCAs == nil {
		t.Fatalf("default TLS not verified: insecure=%v roots=%v", cfg.InsecureSkipVerify, cfg.RootCAs != nil)
	}
	c.Insecure = true
	cfg, err = c.tlsProvider().CreateTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.InsecureSkipVerify {
		t.Fatal("insecure not honoured")
	}
}
