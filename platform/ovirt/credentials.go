package ovirt

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	ovirtclient "github.com/ovirt/go-ovirt-client/v3"
	"sigs.k8s.io/yaml"
)

// Environment variables read by LoadCredentials; they override the file.
const (
	EnvConfig   = "OVIRT_CONFIG" // path of the credentials file
	EnvURL      = "OVIRT_URL"
	EnvUsername = "OVIRT_USERNAME"
	EnvPassword = "OVIRT_PASSWORD"
	EnvCAFile   = "OVIRT_CAFILE"
	EnvCABundle = "OVIRT_CA_BUNDLE"
	EnvInsecure = "OVIRT_INSECURE"
)

// Secret is a string that never prints: every fmt verb, slog and JSON show
// a placeholder, so a Credentials value can be logged by mistake safely.
type Secret string

const redacted = "[redacted]"

// String implements fmt.Stringer.
func (Secret) String() string { return redacted }

// GoString implements fmt.GoStringer (%#v).
func (Secret) GoString() string { return redacted }

// Format implements fmt.Formatter so that no verb (%q, %x, ...) reveals it.
func (Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// MarshalJSON implements json.Marshaler.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// Reveal returns the secret itself, for the one call that sends it.
func (s Secret) Reveal() string { return string(s) }

// Credentials is how to reach and authenticate to the engine.
type Credentials struct {
	// URL is the engine API, e.g. https://engine.example.com/ovirt-engine/api.
	URL      string
	Username string // user@profile, e.g. admin@internal
	Password Secret
	// CAFile and CABundle (PEM) are the CAs that sign the engine's
	// certificate; with neither, the system roots are used.
	CAFile   string
	CABundle string
	// Insecure skips certificate verification; only when set explicitly.
	Insecure bool
}

// fileCredentials is the installer's ~/.ovirt/ovirt-config.yaml.
type fileCredentials struct {
	URL      string `json:"ovirt_url"`
	Username string `json:"ovirt_username"`
	Password string `json:"ovirt_password"`
	CAFile   string `json:"ovirt_cafile"`
	CABundle string `json:"ovirt_ca_bundle"`
	Insecure *bool  `json:"ovirt_insecure"`
}

// DefaultCredentialsPath is where the OpenShift installer keeps the file:
// $OVIRT_CONFIG, else $HOME/.ovirt/ovirt-config.yaml.
func DefaultCredentialsPath(env func(string) string) string {
	if p := env(EnvConfig); p != "" {
		return p
	}
	if home := env("HOME"); home != "" {
		return filepath.Join(home, ".ovirt", "ovirt-config.yaml")
	}
	return ""
}

// LoadCredentials reads the credentials file at path (skipped when path is
// empty) and then the OVIRT_* variables from env, which override the file
// field by field, and validates the result. Errors name the file or the
// variable at fault and never contain the password.
func LoadCredentials(path string, env func(string) string) (Credentials, error) {
	if env == nil {
		env = func(string) string { return "" }
	}
	var c Credentials
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Credentials{}, fmt.Errorf("ovirt: credentials: %w", err)
		}
		var f fileCredentials
		if err := yaml.Unmarshal(data, &f); err != nil {
			// The YAML error may quote the offending line, which can be the
			// password: keep only the position-free summary.
			return Credentials{}, fmt.Errorf("ovirt: credentials %s: not a valid ovirt-config.yaml (keys: ovirt_url, ovirt_username, ovirt_password, ovirt_cafile, ovirt_ca_bundle, ovirt_insecure)", path)
		}
		c = Credentials{URL: f.URL, Username: f.Username, Password: Secret(f.Password),
			CAFile: f.CAFile, CABundle: f.CABundle}
		if f.Insecure != nil {
			c.Insecure = *f.Insecure
		}
	}
	if v := env(EnvURL); v != "" {
		c.URL = v
	}
	if v := env(EnvUsername); v != "" {
		c.Username = v
	}
	if v := env(EnvPassword); v != "" {
		c.Password = Secret(v)
	}
	if v := env(EnvCAFile); v != "" {
		c.CAFile = v
	}
	if v := env(EnvCABundle); v != "" {
		c.CABundle = v
	}
	if v := env(EnvInsecure); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return Credentials{}, fmt.Errorf("ovirt: credentials: %s=%q is not a boolean", EnvInsecure, v)
		}
		c.Insecure = b
	}
	src := "environment (" + EnvURL + ", ...)"
	if path != "" {
		src = path + " or environment"
	}
	if err := c.validate(); err != nil {
		return Credentials{}, fmt.Errorf("ovirt: credentials from %s: %w", src, err)
	}
	return c, nil
}

func (c Credentials) validate() error {
	var errs []error
	if u, err := url.Parse(c.URL); err == nil && u.User != nil {
		// Never echo this URL: it holds a secret we cannot scrub.
		return errors.New("ovirt_url must not contain user:password@; use ovirt_username and ovirt_password")
	}
	switch {
	case c.URL == "":
		errs = append(errs, errors.New("ovirt_url / OVIRT_URL is required"))
	case strings.HasPrefix(c.URL, "https://"):
	case strings.HasPrefix(c.URL, "http://"):
		// Plain HTTP would send the password in clear text.
		errs = append(errs, fmt.Errorf("ovirt_url %s: use https://", c.URL))
	default:
		errs = append(errs, fmt.Errorf("ovirt_url %s: must start with https://", c.URL))
	}
	if i := strings.LastIndex(c.Username, "@"); i <= 0 || i == len(c.Username)-1 {
		errs = append(errs, fmt.Errorf("ovirt_username %q: must be user@profile (e.g. admin@internal)", c.Username))
	}
	if c.Password == "" {
		errs = append(errs, errors.New("ovirt_password / OVIRT_PASSWORD is required"))
	}
	if c.Insecure && (c.CAFile != "" || c.CABundle != "") {
		errs = append(errs, errors.New("ovirt_insecure is set together with a CA (ovirt_cafile/ovirt_ca_bundle): choose one"))
	}
	return errors.Join(errs...)
}

// tlsProvider verifies the engine's certificate unless Insecure: against
// CAFile/CABundle when given, else the system roots.
func (c Credentials) tlsProvider() ovirtclient.TLSProvider {
	t := ovirtclient.TLS()
	if c.Insecure {
		return t.Insecure()
	}
	if c.CAFile == "" && c.CABundle == "" {
		return t.CACertsFromSystem()
	}
	if c.CAFile != "" {
		t = t.CACertsFromFile(c.CAFile)
	}
	if c.CABundle != "" {
		t = t.CACertsFromMemory([]byte(c.CABundle))
	}
	return t
}

// scrubber removes a secret from text; it is the last line of defence
// behind Secret, for messages composed by the client library or quoted
// from the engine (a login error may echo the submitted form, where the
// password appears URL-encoded).
type scrubber struct{ forms []string }

func newScrubber(secret string) scrubber {
	if secret == "" {
		return scrubber{}
	}
	js, _ := json.Marshal(secret)
	forms := []string{secret, url.QueryEscape(secret), url.PathEscape(secret),
		strings.Trim(string(js), `"`), strings.Trim(strconv.Quote(secret), `"`)}
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	return scrubber{forms: slices.Compact(forms)}
}

func (s scrubber) text(msg string) string {
	for _, f := range s.forms {
		msg = strings.ReplaceAll(msg, f, redacted)
	}
	return msg
}

// err returns err with the secret removed from its message; errors.Is/As
// still reach the original through Unwrap.
func (s scrubber) err(err error) error {
	if err == nil || len(s.forms) == 0 {
		return err
	}
	msg := s.text(err.Error())
	if msg == err.Error() {
		return err
	}
	return &scrubbedError{msg: msg, err: err}
}

type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }
