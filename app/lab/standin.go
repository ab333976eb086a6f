package lab

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// APIServerOptions configure the stand-in apiserver.
type APIServerOptions struct {
	// Listen is the HTTPS listen address, e.g. ":6443".
	Listen string
	// Name is the node name put in every answer, so the lab shows who
	// answered.
	Name string
	// FailFile, while it exists, makes /readyz answer 500, like an
	// apiserver shutting down.
	FailFile string
	// Upstream, when set, is a real kube-apiserver (https://IP:port) that
	// every path but /readyz and /version is passed to, so the stand-in
	// serves the Kubernetes API too (its certificate is not verified).
	Upstream string
}

// ServeAPIServer is the lab's stand-in for a control-plane node's
// apiserver until ctx ends: the load balancer needs only HTTPS with a
// /readyz that can fail, and the client a body naming who answered.
func ServeAPIServer(ctx context.Context, o APIServerOptions) error {
	failing := func() bool {
		if o.FailFile == "" {
			return false
		}
		_, err := os.Stat(o.FailFile)
		return err == nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if failing() {
			http.Error(w, "[-]shutdown failed: reason withheld (from "+o.Name+")", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "ok (from %s)\n", o.Name)
	})
	// Any other path keeps answering while /readyz fails: a draining
	// apiserver still serves the requests that reach it.
	whoami := func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintf(w, "{\"node\":%q}\n", o.Name) }
	mux.HandleFunc("GET /version", whoami)
	mux.HandleFunc("GET /lab/stream", func(w http.ResponseWriter, r *http.Request) { stream(ctx, w, r, o.Name) })
	if o.Upstream == "" {
		mux.HandleFunc("GET /", whoami)
	} else {
		u, err := url.Parse(o.Upstream)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return fmt.Errorf("lab apiserver: --upstream %q is not a URL like https://IP:port", o.Upstream)
		}
		p := httputil.NewSingleHostReverseProxy(u)
		// The upstream's test certificate is not verified.
		p.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
		p.FlushInterval = -1 // watches stream
		mux.Handle("/", p)
	}
	return serve(ctx, "lab apiserver", o.Name, mux, o.Listen, true)
}

// stream answers GET /lab/stream?every=DURATION like a watch: a line
// "NAME SEQ" every DURATION (default 1 s) until the client goes, or until
// ctx ends, when the response ends cleanly as an apiserver shutting down
// ends its watches.
func stream(ctx context.Context, w http.ResponseWriter, r *http.Request, name string) {
	every := time.Second
	if d, err := time.ParseDuration(r.URL.Query().Get("every")); err == nil && d >= 10*time.Millisecond {
		every = d
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	t := time.NewTicker(every)
	defer t.Stop()
	for seq := 0; ; seq++ {
		if _, err := fmt.Fprintf(w, "%s %d\n", name, seq); err != nil {
			return
		}
		fl.Flush()
		select {
		case <-ctx.Done():
			return
		case <-r.Context().Done():
			return
		case <-t.C:
		}
	}
}

// ServeMCS is the lab's stand-in Machine Config Server until ctx ends:
// HTTPS /healthz, which the LB's MCS pool checks, and /config/<role>
// answering a minimal Ignition config that names the server.
func ServeMCS(ctx context.Context, listen, name string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /config/{role}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.coreos.ignition+json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"ignition": map[string]string{"version": "3.2.0"},
			"storage": map[string]any{"files": []map[string]any{{
				"path":     "/etc/lab-served-by",
				"contents": map[string]string{"source": "data:," + name + "%20" + r.PathValue("role")},
			}}},
		})
	})
	return serve(ctx, "lab mcs", name, mux, listen, true)
}

// RouterOptions configure the stand-in ingress router.
type RouterOptions struct {
	// Name is the node name put in every answer.
	Name string
	// Stats serves /healthz/ready over HTTP, as a router's stats port
	// (":1936"; the ingress VIP tracks it).
	Stats string
	// HTTP and HTTPS serve every path, answering which router took it.
	HTTP, HTTPS string
}

// ServeRouter is the lab's stand-in for a node's ingress router until ctx
// ends.
func ServeRouter(ctx context.Context, o RouterOptions) error {
	stats := http.NewServeMux()
	stats.HandleFunc("GET /healthz/ready", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	apps := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "{\"router\":%q,\"host\":%q}\n", o.Name, r.Host)
	})
	eg, ctx := errgroup.WithContext(ctx)
	eg.Go(func() error { return serve(ctx, "lab router", o.Name, stats, o.Stats, false) })
	eg.Go(func() error { return serve(ctx, "lab router", o.Name, apps, o.HTTP, false) })
	eg.Go(func() error { return serve(ctx, "lab router", o.Name, apps, o.HTTPS, true) })
	return eg.Wait()
}

// serve runs h on addr until ctx ends; secure serves HTTPS (HTTP/2 too,
// as an apiserver does) with a throw-away certificate.
func serve(ctx context.Context, what, name string, h http.Handler, addr string, secure bool) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		// The LB's TCP-level probes and dropped connections would fill
		// the log with handshake errors.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	if secure {
		cert, err := selfSignedCert(name)
		if err != nil {
			ln.Close()
			return fmt.Errorf("%s: %w", what, err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	}
	errc := make(chan error, 1)
	go func() {
		if secure {
			errc <- srv.ServeTLS(ln, "", "")
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("%s: %w", what, err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	}
}

// selfSignedCert makes a throw-away certificate: the LB passes TLS through
// without looking, and the lab's client does not verify it.
func selfSignedCert(name string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "lab " + strings.TrimSpace(name)},
		DNSNames:     []string{"api." + Domain, "api-int." + Domain, "*.apps." + Domain, "localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
