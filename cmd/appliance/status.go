package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"appliance/vrrp"
)

func newStatusCmd() *cobra.Command {
	var addr string
	var raw bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show what a running appliance is doing (reads its admin /status)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client := &http.Client{Timeout: 5 * time.Second}
			resp, err := client.Get("http://" + addr + "/status")
			if err != nil {
				return fmt.Errorf("status: is an appliance running with its admin listener on %s? (--admin): %w", addr, err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return fmt.Errorf("status: read %s: %w", addr, err)
			}
			if raw {
				_, err := cmd.OutOrStdout().Write(body)
				return err
			}
			var st struct {
				VIPs []vrrp.Status `json:"vips"`
			}
			if err := json.Unmarshal(body, &st); err != nil {
				return fmt.Errorf("status: %s answered something else than a status: %w", addr, err)
			}
			if st.VIPs == nil {
				// The LB, DNS and DHCP services describe themselves in their
				// own shape; show it as it is.
				_, err := cmd.OutOrStdout().Write(body)
				return err
			}
			return printVIPStatus(cmd.OutOrStdout(), st.VIPs)
		},
	}
	cmd.Flags().StringVar(&addr, "admin", "127.0.0.1:9447", "admin listener of the appliance to ask")
	cmd.Flags().BoolVar(&raw, "json", false, "print the raw JSON")
	return cmd
}

func printVIPStatus(w io.Writer, vips []vrrp.Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tVIP\tVRID\tSTATE\tPRIO\tMASTER\tSINCE\tNOTES")
	for _, v := range vips {
		notes := v.Fault
		if v.Collision != "" {
			notes += v.Collision
		}
		for _, t := range v.Tracks {
			if !t.Healthy {
				notes += fmt.Sprintf(" track %s failing", t.Name)
			}
		}
		master := "-"
		if v.Master.IsValid() {
			master = v.Master.String()
		}
		fmt.Fprintf(tw, "%s\t%v\t%d\t%s\t%d\t%s\t%s ago\t%s\n", v.Name, v.VIPs, v.VRID, v.State, v.Priority,
			master, time.Since(v.Since).Round(time.Second), notes)
	}
	return tw.Flush()
}
