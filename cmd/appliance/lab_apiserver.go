package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
)

// newLabAPIServerCmd is the lab's stand-in for a control-plane node's API
// server: the real one is not available here, and the load balancer only
// needs something speaking HTTPS with a /readyz that can fail.
func newLabAPIServerCmd() *cobra.Command {
	var listen, name, failFile string
	cmd := &cobra.Command{
		Use:    "apiserver",
		Short:  "Stand-in API server for the lab: HTTPS /readyz (fails while --fail-file exists)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLabAPIServer(cmd.Context(), listen, name, failFile)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", ":6443", "HTTPS listen address")
	cmd.Flags().StringVar(&name, "name", "", "node name put in every answer, so the lab shows who answered")
	cmd.Flags().StringVar(&failFile, "fail-file", "", "while this file exists /readyz answers 500, like an API server shutting down")
	return cmd
}

func runLabAPIServer(ctx context.Context, listen, name, failFile string) error {
	cert, err := selfSignedCert(name)
	if err != nil {
		return fmt.Errorf("lab apiserver: %w", err)
	}
	failing := func() bool {
		if failFile == "" {
			return false
		}
		_, err := os.Stat(failFile)
		return err == nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if failing() {
			http.Error(w, "[-]shutdown failed: reason withheld (from "+name+")", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "ok (from %s)\n", name)
	})
	// Any other path keeps answering while /readyz fails: a draining API
	// server still serves the requests that reach it.
	mux.HandleFunc("GET /", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "{\"node\":%q}\n", name)
	})
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("lab apiserver: %w", err)
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}},
		// The LB's TCP-level probes and dropped connections would fill the
		// log with handshake errors.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("lab apiserver: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	}
}

// selfSignedCert makes a throw-away certificate; the LB does not verify the
// backend's certificate (TLS passes through it) and curl runs with -k.
func selfSignedCert(name string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "lab-apiserver " + name},
		DNSNames:     []string{"api.ocp4.example.com", "api-int.ocp4.example.com", "localhost"},
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
