package libvirt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	"libvirt.org/go/libvirtxml"

	"appliance/platform"
)

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
