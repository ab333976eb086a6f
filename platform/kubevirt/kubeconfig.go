package kubevirt

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// connection is what loading a kubeconfig yields.
type connection struct {
	rest      *rest.Config
	namespace string // the context's namespace, "" when it sets none
	context   string
	redact    redactor
}

// loadKubeconfig reads the REST config from opts.Kubeconfig (or $KUBECONFIG,
// then ~/.kube/config) and opts.Context. Credentials come only from that
// file; every error is scrubbed of them.
func loadKubeconfig(opts Options) (*connection, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	where := "$KUBECONFIG or ~/.kube/config"
	if opts.Kubeconfig != "" {
		rules.ExplicitPath = opts.Kubeconfig
		where = opts.Kubeconfig
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: opts.Context}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)

	raw, err := cc.RawConfig()
	if err != nil {
		// Nothing parsed, so nothing known to scrub: keep only our words
		// and the loader's, which name the file, not its contents.
		return nil, fmt.Errorf("kubevirt: kubeconfig %s: %s", where, scrubUnknown(err))
	}
	red := secretsOf(&raw)
	ctxName := opts.Context
	if ctxName == "" {
		ctxName = raw.CurrentContext
	}
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, red.errorf("kubevirt: kubeconfig %s, context %q: %w", where, ctxName, err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, red.errorf("kubevirt: kubeconfig %s, context %q: namespace: %w", where, ctxName, err)
	}
	if ctxRec, ok := raw.Contexts[ctxName]; !ok || ctxRec.Namespace == "" {
		ns = "" // the loader says "default"; let Options decide
	}
	if opts.Insecure {
		// Only on the user's explicit request; a CA must go or the
		// transport refuses the combination.
		rc.Insecure = true
		rc.CAData = nil
		rc.CAFile = ""
	}
	return &connection{rest: rc, namespace: ns, context: ctxName, redact: red}, nil
}

// redactor replaces known secret strings in error text.
type redactor []string

// secretsOf collects every credential string in a kubeconfig.
func secretsOf(c *clientcmdapi.Config) redactor {
	var r redactor
	add := func(s string) {
		// Short strings (like "x") would redact innocent words.
		if len(s) >= 6 {
			r = append(r, s)
		}
	}
	for _, a := range c.AuthInfos {
		if a == nil {
			continue
		}
		add(a.Token)
		add(a.Password)
		add(string(a.ClientKeyData))
		if a.AuthProvider != nil {
			for _, v := range a.AuthProvider.Config {
				add(v)
			}
		}
		if a.Exec != nil {
			for _, e := range a.Exec.Env {
				add(e.Value)
			}
		}
	}
	return r
}

// errorf formats like fmt.Errorf; if the text would contain a secret, the
// secret is replaced and the wrapped chain is dropped so no caller can
// print it either.
func (r redactor) errorf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return r.scrub(err)
}

// scrub returns err, or a plain copy of its text with secrets replaced.
func (r redactor) scrub(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	leaked := false
	for _, s := range r {
		if strings.Contains(msg, s) {
			msg = strings.ReplaceAll(msg, s, "[REDACTED]")
			leaked = true
		}
	}
	if !leaked {
		return err
	}
	return errors.New(msg)
}

// scrubUnknown keeps the first line of a loader error and cuts YAML/JSON
// snippets a parser may quote from the file.
func scrubUnknown(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	// Parsers quote offending input after a colon-space and a quote;
	// drop from the first quote on.
	if i := strings.IndexAny(msg, "\"'`"); i >= 0 {
		msg = strings.TrimRight(msg[:i], " :") + " (details withheld: they may quote credentials)"
	}
	return msg
}
