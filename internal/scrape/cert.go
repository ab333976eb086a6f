package scrape

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"
)

// DefaultCertFile is the kubelet's serving certificate and key in one PEM
// file: a symlink the kubelet repoints at each rotation, signed by the
// kubelet-serving CA (the CA cluster monitoring verifies the kubelet
// with), for the node's host name and the kubelet's node IP.
const DefaultCertFile = "/var/lib/kubelet/pki/kubelet-server-current.pem"

// CertStatus is what the endpoint serves itself with, for /status.
type CertStatus struct {
	File     string    `json:"file"`
	Loaded   bool      `json:"loaded"`
	Subject  string    `json:"subject,omitempty"`
	DNSNames []string  `json:"dns_names,omitempty"`
	IPs      []string  `json:"ips,omitempty"`
	NotAfter time.Time `json:"not_after,omitzero"`
	LoadedAt time.Time `json:"loaded_at,omitzero"`
	// Error is why the file did not load the last time it was read; with
	// Loaded, the certificate loaded before is still in service.
	Error string `json:"error,omitempty"`
}

// certSource serves the certificate of one PEM file and reads the file
// again when it changes (another inode, size or modification time behind
// the path, symlinks followed).
type certSource struct {
	path  string
	every time.Duration // at most one look at the file per every
	log   *slog.Logger

	mu       sync.Mutex
	cert     *tls.Certificate
	id       fileID // of the file cert came from
	checked  time.Time
	loadedAt time.Time
	err      error
}

type fileID struct {
	dev, ino uint64
	size     int64
	mtime    time.Time
}

func statID(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	if !fi.Mode().IsRegular() {
		return fileID{}, fmt.Errorf("%s is not a regular file", path)
	}
	id := fileID{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), st.Ino
	}
	return id, nil
}

// get is the certificate to serve: the file is looked at first when the
// last look is older than every. It fails only while no certificate ever
// loaded.
func (c *certSource) get() (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.checked) >= c.every {
		c.refreshLocked()
	}
	if c.cert == nil {
		return nil, c.err
	}
	return c.cert, nil
}

// refresh looks at the file now.
func (c *certSource) refresh() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshLocked()
}

func (c *certSource) refreshLocked() {
	c.checked = time.Now()
	id, err := statID(c.path)
	if err == nil && c.cert != nil && id == c.id {
		return
	}
	var cert *tls.Certificate
	if err == nil {
		cert, err = loadPEM(c.path)
	}
	if err != nil {
		err = fmt.Errorf("serving certificate %s: %w", c.path, err)
		if c.err == nil || c.err.Error() != err.Error() {
			if c.cert != nil {
				c.log.Warn("serving certificate file does not load; the one loaded before stays in service", "err", err)
			} else {
				c.log.Warn("no serving certificate yet; the secure endpoint waits for it and does not listen", "err", err)
			}
		}
		c.err = err
		return
	}
	first := c.cert == nil
	c.cert, c.id, c.err, c.loadedAt = cert, id, nil, c.checked
	msg := "serving certificate rotated; served from the next handshake on"
	if first {
		msg = "serving certificate loaded"
	}
	c.log.Info(msg, "file", c.path, "subject", cert.Leaf.Subject.String(), "not_after", cert.Leaf.NotAfter, "serial", cert.Leaf.SerialNumber.String())
}

// loadPEM reads a certificate chain and its private key from one file,
// as the kubelet writes kubelet-server-current.pem (X509KeyPair takes the
// CERTIFICATE blocks from the first argument and the key from the second,
// skipping the other kind in each).
func loadPEM(path string) (*tls.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(b, b)
	if err != nil {
		return nil, err
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &cert, nil
}

// status is the CertStatus now, without looking at the file.
func (c *certSource) status() CertStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := CertStatus{File: c.path, Loaded: c.cert != nil, LoadedAt: c.loadedAt}
	if c.err != nil {
		st.Error = c.err.Error()
	}
	if c.cert != nil {
		l := c.cert.Leaf
		st.Subject, st.DNSNames, st.NotAfter = l.Subject.String(), l.DNSNames, l.NotAfter
		for _, ip := range l.IPAddresses {
			st.IPs = append(st.IPs, ip.String())
		}
	}
	return st
}

// problem is why no certificate is served, or nil.
func (c *certSource) problem() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.cert != nil:
		return nil
	case c.err != nil:
		return c.err
	default:
		return errors.New("serving certificate not read yet")
	}
}
