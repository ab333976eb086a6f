package provision

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"appliance/internal/cluster"
	"appliance/platform"
)

// Options say what a Session works with.
type Options struct {
	// Config is the validated appliance.yaml; ConfigPath names it in errors.
	Config     *cluster.Config
	ConfigPath string
	// Assets is the installer's asset directory (bootstrap.ign, master.ign,
	// worker.ign, metadata.json); "" reads none.
	Assets string
	// NeedAssets refuses a run without Assets: every run but destroy, which
	// needs only the infra ID, builds from them.
	NeedAssets bool
}

// Session is one run against the platform appliance.yaml names: the config,
// the spec built from it and the assets (without the base image, which apply
// fetches only when it builds something), and the platform connection.
type Session struct {
	log *slog.Logger
	cfg *cluster.Config
	// path is appliance.yaml's path, for messages.
	path string
	// noAssets is set when the spec was built without the assets: its infra
	// ID may then differ from the one apply read from metadata.json.
	noAssets bool
	spec     *platform.Spec
	pr       platform.Provider
}

// Open builds the spec from the config and, when given, the assets, and
// connects to the platform. Close releases the connection.
func Open(ctx context.Context, opts Options, log *slog.Logger) (*Session, error) {
	cfg := opts.Config
	if cfg.Provision == nil {
		return nil, fmt.Errorf("provision: %s has no provision section; add one, e.g.\n  provision:\n    platform: libvirt", opts.ConfigPath)
	}
	s := &Session{log: log, cfg: cfg, path: opts.ConfigPath}
	switch {
	case opts.Assets != "":
		assets, err := platform.LoadAssets(opts.Assets, platform.Roles(cfg))
		if err != nil {
			return nil, err
		}
		if s.spec, err = platform.BuildSpec(cfg, assets, platform.Image{}); err != nil {
			return nil, err
		}
	case opts.NeedAssets:
		return nil, errors.New("provision: give --assets DIR, the installer's directory with bootstrap.ign, master.ign and worker.ign")
	default:
		s.spec, s.noAssets = bareSpec(cfg), true
	}
	pr, err := openProvider(ctx, cfg.Provision, log)
	if err != nil {
		return nil, fmt.Errorf("provision: %s: %w", cfg.Provision.Platform, err)
	}
	s.pr = pr
	return s, nil
}

// bareSpec is the spec of a run without the assets: the infra ID and the
// cluster's name, no machines.
func bareSpec(cfg *cluster.Config) *platform.Spec {
	return &platform.Spec{InfraID: platform.InfraID(cfg, nil), ClusterName: cfg.Cluster.Name, BaseDomain: cfg.Cluster.BaseDomain}
}

// Config is the session's appliance.yaml.
func (s *Session) Config() *cluster.Config { return s.cfg }

// Close releases the platform connection; a failure is only logged, since
// the run's outcome is already decided.
func (s *Session) Close() {
	if err := s.pr.Close(); err != nil {
		s.log.Warn("provision: closing the platform connection", "err", err)
	}
}

// Where names the platform and its endpoint, for headers and messages.
func Where(p *cluster.Provision) string {
	switch p.Platform {
	case cluster.PlatformLibvirt:
		return fmt.Sprintf("libvirt (%s, pool %s)", p.Libvirt.URI, p.Libvirt.Pool)
	case cluster.PlatformOVirt:
		return fmt.Sprintf("ovirt (cluster %s)", p.OVirt.ClusterID)
	case cluster.PlatformKubeVirt:
		return fmt.Sprintf("kubevirt (namespace %s)", p.KubeVirt.Namespace)
	}
	return p.Platform
}

// preflighter is a provider that can check, before anything is created,
// what its VMs need from the platform.
type preflighter interface {
	Preflight(context.Context, *platform.Spec) (warnings []string, err error)
}

// preflight runs the provider's checks, when it has any: the warnings, and
// an error joining every refusal.
func (s *Session) preflight(ctx context.Context) ([]string, error) {
	pf, ok := s.pr.(preflighter)
	if !ok {
		return nil, nil
	}
	return pf.Preflight(ctx, s.spec)
}
