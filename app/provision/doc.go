// Package provision is `appliance provision`'s composition: it joins the
// platforms (package platform and its providers), the RHCOS images (package
// images) and the node files (package bootstrap) into the runs behind plan,
// apply, status, destroy and destroy --bootstrap.
//
// It owns the decisions between them: which provider a config names and its
// options from appliance.yaml and the platform's own credentials files and
// environment; the infra ID a run works with (platform.InfraID); the
// Ignition each VM boots (the appliance's files merged into a copy of its
// role's asset, or the asset as it is; a config over
// platform.MaxIgnitionSize served from this machine behind a pointer
// config); where the base image comes from (a local file, a container
// disk, a URL the cluster imports itself, or a verified download in the
// cache); and when the bootstrap node may go.
//
// A Session is one run against one platform. Its methods return data and
// report what happens as it happens through Events; the command turns both
// into text, live lines and exit codes, and holds no decision of its own.
package provision
