package libvirt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	"libvirt.org/go/libvirtxml"

	"appliance/platform"
)

// Options says where and how to create the VMs.
type Options struct {
	// URI is the libvirt connection URI: qemu:///system (default),
	// test:///default, qemu+tcp://host/system, qemu+tls://host/system (TLS
	// verified unless the URI says no_verify=1), qemu+ssh://user@host/system.
	// Put no password in it: it would be a credential in a config file.
	URI string
	// Socket overrides the local unix socket path (qemu:///system's default
	// is /var/run/libvirt/libvirt-sock); only for local URIs.
	Socket string
	// Pool is the storage pool for the base image, disks and Ignition
	// (default "default"). Its volumes' paths must be target/name, as in
	// dir, fs, netfs and logical pools.
	Pool string
	// Network is a libvirt network name, Bridge a host bridge; set at most
	// one (neither means Network "default").
	Network, Bridge string
	// DomainType is "kvm" (default) or "qemu" for TCG emulation.
	DomainType string
	// Machine is the machine type (e.g. "q35"); empty for libvirt's default.
	Machine string
	// Firmware is "" for BIOS or "efi".
	Firmware string
	// AgentTimeout bounds a guest agent address query in List (default 2s).
	AgentTimeout time.Duration
}

// withDefaults fills the defaults and checks the combinations.
func (o Options) withDefaults() (Options, error) {
	if o.URI == "" {
		o.URI = "qemu:///system"
	}
	if o.Pool == "" {
		o.Pool = "default"
	}
	if o.Network != "" && o.Bridge != "" {
		return o, errors.New("libvirt: options: set network or bridge, not both")
	}
	if o.Network == "" && o.Bridge == "" {
		o.Network = "default"
	}
	if o.DomainType == "" {
		o.DomainType = "kvm"
	}
	if o.DomainType != "kvm" && o.DomainType != "qemu" {
		return o, fmt.Errorf("libvirt: options: domainType %q: want kvm or qemu", o.DomainType)
	}
	if o.Firmware != "" && o.Firmware != "efi" && o.Firmware != "bios" {
		return o, fmt.Errorf("libvirt: options: firmware %q: want efi or bios", o.Firmware)
	}
	if o.Firmware == "bios" {
		o.Firmware = ""
	}
	if o.AgentTimeout <= 0 {
		o.AgentTimeout = 2 * time.Second
	}
	return o, nil
}

// Provider creates a cluster's VMs on one libvirt connection. Its methods
// may be called concurrently for different machines.
type Provider struct {
	l      *golibvirt.Libvirt
	opts   Options
	log    *slog.Logger
	pool   poolInfo
	hs     hostSettings
	driver string // "QEMU", "TEST", ...

	// hook, when set by a test, runs after each creation step; an error
	// stops Create there, as a kill would.
	hook func(machine, step string) error
}

var _ platform.Provider = (*Provider)(nil)

// New connects to libvirt and checks that the pool (and network) exist.
func New(ctx context.Context, opts Options, log *slog.Logger) (*Provider, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(opts.URI)
	if err != nil {
		// url.Parse quotes the input, which may hold a password.
		return nil, errors.New("libvirt: options: uri is not a valid URL")
	}
	shown := u.Redacted()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var l *golibvirt.Libvirt
	if opts.Socket != "" {
		if strings.Contains(u.Scheme, "+") || u.Host != "" {
			return nil, fmt.Errorf("libvirt: options: socket is only for local URIs, not %s", shown)
		}
		l = golibvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(opts.Socket)))
		if err := l.ConnectToURI(golibvirt.RemoteURI(u)); err != nil {
			return nil, fmt.Errorf("libvirt: connect %s via %s: %w", shown, opts.Socket, err)
		}
	} else {
		l, err = golibvirt.ConnectToURI(u)
		if err != nil {
			return nil, fmt.Errorf("libvirt: connect %s: %w", shown, redactErr(err, u))
		}
	}
	p := &Provider{l: l, opts: opts, log: log.With("component", "libvirt"),
		hs: hostSettings{DomainType: opts.DomainType, Machine: opts.Machine, Firmware: opts.Firmware, Network: opts.Network, Bridge: opts.Bridge}}
	if err := p.init(); err != nil {
		_ = l.Disconnect()
		return nil, err
	}
	p.log.Debug("connected", "uri", shown, "driver", p.driver, "pool", p.pool.Name, "poolPath", p.pool.Path)
	return p, nil
}

// redactErr drops a URI password from an error text, should a dialer ever
// quote the URI it was given.
func redactErr(err error, u *url.URL) error {
	if pw, ok := u.User.Password(); ok && pw != "" && strings.Contains(err.Error(), pw) {
		return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
	}
	return err
}

func (p *Provider) init() error {
	var err error
	if p.driver, err = p.l.ConnectGetType(); err != nil {
		return fmt.Errorf("libvirt: driver type: %w", err)
	}
	pool, err := p.l.StoragePoolLookupByName(p.opts.Pool)
	if err != nil {
		return fmt.Errorf("libvirt: pool %q: %w (define it, e.g. `virsh pool-define-as %s dir --target DIR`)", p.opts.Pool, err, p.opts.Pool)
	}
	if active, err := p.l.StoragePoolIsActive(pool); err != nil {
		return fmt.Errorf("libvirt: pool %q: %w", p.opts.Pool, err)
	} else if active == 0 {
		return fmt.Errorf("libvirt: pool %q is not active (`virsh pool-start %s`)", p.opts.Pool, p.opts.Pool)
	}
	doc, err := p.l.StoragePoolGetXMLDesc(pool, 0)
	if err != nil {
		return fmt.Errorf("libvirt: pool %q: %w", p.opts.Pool, err)
	}
	var px libvirtxml.StoragePool
	if err := px.Unmarshal(doc); err != nil {
		return fmt.Errorf("libvirt: pool %q: parse XML: %w", p.opts.Pool, err)
	}
	p.pool = poolInfo{Name: pool.Name}
	if px.Target != nil {
		p.pool.Path = px.Target.Path
	}
	if p.pool.Path == "" {
		return fmt.Errorf("libvirt: pool %q has no target path; use a dir, fs, netfs or logical pool", p.opts.Pool)
	}
	if p.opts.Network != "" {
		if _, err := p.l.NetworkLookupByName(p.opts.Network); err != nil {
			return fmt.Errorf("libvirt: network %q: %w", p.opts.Network, err)
		}
	}
	return nil
}

// Close releases the connection.
func (p *Provider) Close() error {
	if err := p.l.Disconnect(); err != nil {
		return fmt.Errorf("libvirt: disconnect: %w", err)
	}
	return nil
}

// isCode reports whether err is a libvirt error with the given number.
func isCode(err error, code golibvirt.ErrorNumber) bool {
	var e golibvirt.Error
	return errors.As(err, &e) && e.Code == uint32(code)
}

// lookupDomain finds a domain by name; found is false when none exists.
func (p *Provider) lookupDomain(name string) (golibvirt.Domain, bool, error) {
	d, err := p.l.DomainLookupByName(name)
	if isCode(err, golibvirt.ErrNoDomain) {
		return d, false, nil
	}
	if err != nil {
		return d, false, fmt.Errorf("libvirt: look up domain %s: %w", name, err)
	}
	return d, true, nil
}

// domainMark reads a domain's mark from its persistent definition.
func (p *Provider) domainMark(d golibvirt.Domain) (Mark, error) {
	doc, err := p.l.DomainGetXMLDesc(d, golibvirt.DomainXMLInactive)
	if err != nil {
		return Mark{}, fmt.Errorf("libvirt: domain %s XML: %w", d.Name, err)
	}
	return markFromDomainXML(doc)
}

// lookupVol finds a volume by name in the provider's pool.
func (p *Provider) lookupVol(name string) (golibvirt.StorageVol, bool, error) {
	return p.lookupVolIn(p.pool.Name, name)
}

func (p *Provider) lookupVolIn(pool, name string) (golibvirt.StorageVol, bool, error) {
	pl, err := p.l.StoragePoolLookupByName(pool)
	if err != nil {
		return golibvirt.StorageVol{}, false, fmt.Errorf("libvirt: pool %q: %w", pool, err)
	}
	v, err := p.l.StorageVolLookupByName(pl, name)
	if isCode(err, golibvirt.ErrNoStorageVol) {
		return v, false, nil
	}
	if err != nil {
		return v, false, fmt.Errorf("libvirt: look up volume %s/%s: %w", pool, name, err)
	}
	return v, true, nil
}

// define (re)defines a domain and returns it.
func (p *Provider) define(d *libvirtxml.Domain) (golibvirt.Domain, error) {
	doc, err := d.Marshal()
	if err != nil {
		return golibvirt.Domain{}, fmt.Errorf("libvirt: domain %s: render XML: %w", d.Name, err)
	}
	dom, err := p.l.DomainDefineXMLFlags(doc, 0)
	if err != nil {
		return dom, fmt.Errorf("libvirt: define domain %s: %w", d.Name, err)
	}
	return dom, nil
}

// uuidString formats a libvirt UUID the way domain XML spells it.
func uuidString(u golibvirt.UUID) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// createVol creates a volume in the provider's pool from its XML.
func (p *Provider) createVol(name, doc string) (golibvirt.StorageVol, error) {
	pl, err := p.l.StoragePoolLookupByName(p.pool.Name)
	if err != nil {
		return golibvirt.StorageVol{}, fmt.Errorf("libvirt: pool %q: %w", p.pool.Name, err)
	}
	v, err := p.l.StorageVolCreateXML(pl, doc, 0)
	if err != nil {
		return v, fmt.Errorf("libvirt: create volume %s/%s: %w", p.pool.Name, name, err)
	}
	return v, nil
}

// deleteVolIfExists deletes a volume; a missing one is not an error.
func (p *Provider) deleteVolIfExists(pool, name string) (bool, error) {
	v, found, err := p.lookupVolIn(pool, name)
	if err != nil || !found {
		return false, err
	}
	if err := p.l.StorageVolDelete(v, golibvirt.StorageVolDeleteNormal); err != nil {
		if isCode(err, golibvirt.ErrNoStorageVol) {
			return false, nil
		}
		return false, fmt.Errorf("libvirt: delete volume %s/%s: %w", pool, name, err)
	}
	return true, nil
}

// upload streams size bytes from r into v. Cancelling ctx or a read error
// ends the stream early (go-libvirt cannot abort a stream cleanly), and the
// short upload is reported as an error, so the caller never marks it done.
func (p *Provider) upload(ctx context.Context, v golibvirt.StorageVol, r io.Reader, size int64, progress func(done, total int64)) error {
	cr := &countingReader{ctx: ctx, r: r, total: size, progress: progress}
	err := p.l.StorageVolUpload(v, cr, 0, uint64(size), 0)
	if err != nil {
		if isCode(err, golibvirt.ErrNoSupport) && p.isTestDriver() {
			// test:///default stores no volume contents; nothing to send.
			if progress != nil {
				progress(size, size)
			}
			return nil
		}
		return fmt.Errorf("libvirt: upload to volume %s: %w", v.Name, err)
	}
	if cr.err != nil {
		return fmt.Errorf("libvirt: upload to volume %s interrupted after %d of %d bytes: %w", v.Name, cr.done, size, cr.err)
	}
	if cr.done != size {
		return fmt.Errorf("libvirt: upload to volume %s: sent %d of %d bytes", v.Name, cr.done, size)
	}
	return nil
}

type countingReader struct {
	ctx         context.Context
	r           io.Reader
	done, total int64
	progress    func(done, total int64)
	err         error
}

func (c *countingReader) Read(b []byte) (int, error) {
	if c.err != nil {
		return 0, io.EOF
	}
	if err := c.ctx.Err(); err != nil {
		c.err = err
		return 0, io.EOF
	}
	// Stop at total even if the file grew meanwhile.
	if rest := c.total - c.done; int64(len(b)) > rest {
		b = b[:rest]
	}
	if len(b) == 0 {
		return 0, io.EOF
	}
	n, err := c.r.Read(b)
	c.done += int64(n)
	if c.progress != nil && n > 0 {
		c.progress(c.done, c.total)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		c.err = err
		return n, io.EOF
	}
	return n, err
}

// isTestDriver reports test:///default, which keeps no volume contents.
func (p *Provider) isTestDriver() bool { return strings.EqualFold(p.driver, "test") }
