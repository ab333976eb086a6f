package kubenodes_test

import (
	"context"
	"log/slog"

	"appliance/internal/cluster"
	"appliance/internal/kubenodes"
	"appliance/internal/service"
)

// How `appliance run` wires the member source: the kubeconfig from the
// flag or the kubelet's, the node's own apiserver on nodes that run one,
// and the Watcher as one more service writing into the shared State.
func Example() {
	var (
		cfg        *cluster.Config // loaded from appliance.yaml
		role       cluster.Role    // this node's
		kubeconfig string          // --kubeconfig, often empty
		log        = slog.Default()
	)
	state := cluster.NewState(cfg)
	var services service.Stage
	if kc := kubenodes.Kubeconfig(kubeconfig); kc != "" {
		opts := kubenodes.Options{Kubeconfig: kc}
		if role == cluster.RoleMaster || role == cluster.RoleBootstrap {
			// Never through the API VIP this node may hold itself.
			opts.LocalServer = kubenodes.DefaultLocalServer
		}
		w, err := kubenodes.New(state, opts, log)
		if err != nil {
			log.Error("no Kubernetes member source", "err", err)
			return
		}
		services = append(services, w)
	}
	_ = service.Run(context.Background(), log, service.Options{}, services)
}
