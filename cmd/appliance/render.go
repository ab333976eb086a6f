package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"appliance/app/render"
)

type renderFlags struct {
	config string
	out    string
	iface  string
}

func newRenderCmd(g *globalFlags) *cobra.Command {
	f := &renderFlags{}
	cmd := &cobra.Command{
		Use:   "render",
		Short: "Write BIND, dnsmasq, haproxy, keepalived and /etc/hosts files for sites that run their own",
		Long: `Write the configuration of a site's own network services from the cluster config:

  appliance render --config appliance.yaml --out DIR

DIR/bind/named.conf and its zone files, DIR/dnsmasq/dnsmasq.conf,
DIR/haproxy/haproxy.cfg, DIR/keepalived/ROLE/keepalived.conf and DIR/hosts
answer, lease, balance and fail over exactly as appliance dns, dhcp, lb and
vip do from the same config, so the two can be mixed. DIR is replaced as a
whole, at once; an existing DIR must be empty or written by an earlier run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, cfg, err := g.serviceStart("render", f.config)
			if err != nil {
				return err
			}
			if f.out == "" {
				return errors.New("render: give --out DIR, the folder to write")
			}
			data, err := os.ReadFile(f.config)
			if err != nil {
				return fmt.Errorf("render: %w", err)
			}
			sum := sha256.Sum256(data)
			res, err := render.Render(cfg, render.Options{
				Source: f.config, Digest: hex.EncodeToString(sum[:]), Version: version, Interface: f.iface,
			})
			if err != nil {
				return err
			}
			for _, n := range res.Notes {
				log.Warn(n)
			}
			if err := render.WriteDir(f.out, res.Files); err != nil {
				return err
			}
			for _, file := range res.Files {
				fmt.Fprintln(cmd.OutOrStdout(), filepath.Join(f.out, file.Path))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "appliance.yaml (or install-config.yaml) describing the cluster")
	fl.StringVar(&f.out, "out", "", "folder to write (replaced as a whole)")
	fl.StringVar(&f.iface, "interface", "", "interface for keepalived and dnsmasq (default network.interface)")
	return cmd
}
