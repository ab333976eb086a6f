package provision

import (
	"fmt"
	"log/slog"
	"slices"

	"appliance/bootstrap"
	"appliance/internal/cluster"
	"appliance/platform"
)

// Ignition is apply's say over the Ignition each VM boots with.
type Ignition struct {
	// Files are the options the appliance's node files are made with, as
	// for `appliance ignition`; Files.Image is the appliance image the
	// nodes run (--image).
	Files bootstrap.Options
	// NoInject boots the installer's assets as they are (--no-inject).
	NoInject bool
	// Serve is ADDR:PORT of this machine, reachable from the VMs, to serve a
	// config too large for the platform from (--serve-ignition); "" serves
	// none.
	Serve string
}

// bootIgnition is what prepareIgnition made of the assets.
type bootIgnition struct {
	// server serves the configs too large to hand a VM; nil when none is.
	server *bootstrap.ConfigServer
	// served are the roles it serves, in spec order.
	served []cluster.Role
}

// close stops the server, if any.
func (b *bootIgnition) close() {
	if b.server != nil {
		b.server.Close()
	}
}

// prepareIgnition gives each machine of spec the Ignition it boots with:
// its role's asset with the appliance's files merged in (the same edit as
// `appliance ignition`, on a copy: the asset files stay as they are), and,
// for a config over the platform's platform.MaxIgnitionSize, a pointer to
// it served from this machine over HTTPS (its answers logged to log).
// The merge's warnings go to emit.
func prepareIgnition(spec *platform.Spec, cfg *cluster.Config, f Ignition, emit func(Event), log *slog.Logger) (*bootIgnition, error) {
	var roles []cluster.Role
	conf, source := map[cluster.Role][]byte{}, map[cluster.Role]string{}
	for _, m := range spec.Machines {
		if _, ok := conf[m.Role]; !ok {
			roles = append(roles, m.Role)
			conf[m.Role], source[m.Role] = m.Ignition, m.IgnitionSource
		}
	}
	if !f.NoInject {
		if err := bootstrap.CheckImage(f.Files.Image); err != nil {
			return nil, fmt.Errorf("provision apply: %w; or give --no-inject to boot the assets as they are", err)
		}
		for _, role := range roles {
			files, err := bootstrap.Files(cfg, role, f.Files)
			if err != nil {
				return nil, fmt.Errorf("provision apply: the appliance's files for %s: %w", source[role], err)
			}
			m, err := bootstrap.Merge(source[role], conf[role], files)
			if err != nil {
				return nil, fmt.Errorf("provision apply: %w", err)
			}
			for _, w := range m.Warnings {
				emit(IgnitionWarning{Text: w})
			}
			conf[role] = m.Config
			if len(files) > 0 {
				source[role] += fmt.Sprintf(" + appliance (%d files)", len(files))
			}
		}
	}
	b := &bootIgnition{}
	big := map[cluster.Role][]byte{}
	for _, role := range roles {
		if len(conf[role]) <= platform.MaxIgnitionSize {
			continue
		}
		if f.Serve == "" {
			return nil, fmt.Errorf("provision apply: %s is %d bytes, over the %d a VM can be handed on this platform; give --serve-ignition ADDR:PORT (an address of this machine the VMs reach) to serve it over HTTPS and hand the VM a small pointer config", source[role], len(conf[role]), platform.MaxIgnitionSize)
		}
		big[role] = conf[role]
		b.served = append(b.served, role)
	}
	if len(big) > 0 {
		srv, err := bootstrap.ServeConfigs(f.Serve, big, log)
		if err != nil {
			return nil, fmt.Errorf("provision apply: --serve-ignition: %w", err)
		}
		b.server = srv
		for _, role := range b.served {
			p, err := srv.Pointer(role)
			if err != nil {
				srv.Close()
				return nil, fmt.Errorf("provision apply: %w", err)
			}
			conf[role] = p
			source[role] += ", served at " + srv.ConfigURL(role)
		}
	}
	for i := range spec.Machines {
		m := &spec.Machines[i]
		m.Ignition, m.IgnitionSource = conf[m.Role], source[m.Role]
	}
	return b, nil
}

// awaiting are the served roles with a machine that apply created or
// completed: those VMs have yet to fetch their config. One that existed
// before was given an earlier run's pointer and CA, not this server's.
func (b *bootIgnition) awaiting(spec *platform.Spec, res *platform.Result) []cluster.Role {
	var out []cluster.Role
	for _, m := range spec.Machines {
		if !slices.Contains(b.served, m.Role) || slices.Contains(out, m.Role) {
			continue
		}
		if slices.Contains(res.Created, m.Name) || slices.Contains(res.Completed, m.Name) {
			out = append(out, m.Role)
		}
	}
	return out
}
