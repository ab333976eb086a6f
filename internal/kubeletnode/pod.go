package kubeletnode

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// get sends GET path to addr inside the node, over TLS (the kubelet's
// self-signed certificate, not verified) when secure.
func (k *Node) get(addr, path string, secure bool) (string, error) {
	raw, err := k.Node.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
	c := raw
	if secure {
		c = tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) // the kubelet's own self-signed serving certificate
	}
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, addr); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return string(b), err
}

// KubeletPod is the static pod as the kubelet reports it on its /pods
// (status, conditions, restart counts); nil when it has none by that name.
func (k *Node) KubeletPod() (*corev1.Pod, error) {
	body, err := k.get("127.0.0.1:10250", "/pods", true)
	if err != nil {
		return nil, fmt.Errorf("kubelet on %s: %w", k.Name, err)
	}
	var list corev1.PodList
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		return nil, fmt.Errorf("kubelet on %s: /pods: %w", k.Name, err)
	}
	spec := k.Pod()
	for i := range list.Items {
		if p := &list.Items[i]; p.Name == k.PodName() && p.Namespace == spec.Namespace {
			return p, nil
		}
	}
	return nil, nil
}

// Ready reports whether the kubelet has the pod Ready, and why not.
func (k *Node) Ready() (bool, string) {
	p, err := k.KubeletPod()
	switch {
	case err != nil:
		return false, err.Error()
	case p == nil:
		return false, "no pod " + k.PodName()
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			if c.Status == corev1.ConditionTrue {
				return true, ""
			}
			return false, fmt.Sprintf("%s: Ready %s (%s %s)", k.PodName(), c.Status, c.Reason, c.Message)
		}
	}
	return false, fmt.Sprintf("%s: phase %s, no Ready condition", k.PodName(), p.Status.Phase)
}

// WaitReady waits until the kubelet has the pod Ready.
func (k *Node) WaitReady(ctx context.Context, within time.Duration) error {
	return poll(ctx, within, func() error {
		if ok, why := k.Ready(); !ok {
			return fmt.Errorf("%s", why)
		}
		return nil
	})
}

// Container is one container as `crictl ps -o json` lists it.
type Container struct {
	ID       string `json:"id"`
	Metadata struct {
		Name    string `json:"name"`
		Attempt uint32 `json:"attempt"` // the kubelet's restart count
	} `json:"metadata"`
	ImageRef  string `json:"imageRef"`
	State     string `json:"state"`     // CONTAINER_RUNNING, CONTAINER_EXITED, ...
	CreatedAt string `json:"createdAt"` // nanoseconds since the epoch
}

// Created is when the runtime created the container.
func (c Container) Created() time.Time {
	n, _ := strconv.ParseInt(c.CreatedAt, 10, 64)
	return time.Unix(0, n)
}

// Running reports whether the container runs.
func (c Container) Running() bool { return c.State == "CONTAINER_RUNNING" }

// Crictl runs crictl on the node's containerd (inside its namespace, so
// exec and logs work) and returns its standard output.
func (k *Node) Crictl(args ...string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.Command(k.env["CRICTL"], args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubelet on %s: crictl %s: %w: %s", k.Name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// Containers lists the containers of the static pod's name (its pods
// before a replacement too, until the kubelet's garbage collection takes
// them) named as its manifest's container, running or not, oldest first.
func (k *Node) Containers() ([]Container, error) {
	out, err := k.Crictl("ps", "-a", "-o", "json", "--label", "io.kubernetes.pod.name="+k.PodName())
	if err != nil {
		return nil, err
	}
	var list struct {
		Containers []Container `json:"containers"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("kubelet on %s: crictl ps: %w", k.Name, err)
	}
	name := k.Pod().Spec.Containers[0].Name
	cs := slices.DeleteFunc(list.Containers, func(c Container) bool { return c.Metadata.Name != name })
	slices.SortFunc(cs, func(a, b Container) int { return a.Created().Compare(b.Created()) })
	return cs, nil
}

// Running is the pod's running container; ok false when none runs.
func (k *Node) Running() (c Container, ok bool, err error) {
	cs, err := k.Containers()
	if err != nil {
		return c, false, err
	}
	for _, c := range cs {
		if c.Running() {
			return c, true, nil
		}
	}
	return c, false, nil
}

// Status is what `crictl inspect -o json` says of a container.
type Status struct {
	Status struct {
		ID         string `json:"id"`
		State      string `json:"state"`
		StartedAt  string `json:"startedAt"`  // RFC 3339
		FinishedAt string `json:"finishedAt"` // RFC 3339
		ExitCode   int    `json:"exitCode"`
		Reason     string `json:"reason"`
		ImageRef   string `json:"imageRef"`
		Image      struct {
			Image string `json:"image"`
		} `json:"image"`
	} `json:"status"`
	Info struct {
		Pid int `json:"pid"` // in this machine's pid namespace
	} `json:"info"`
}

// Started and Finished are the container's start and exit.
func (s Status) Started() time.Time  { return rfc3339(s.Status.StartedAt) }
func (s Status) Finished() time.Time { return rfc3339(s.Status.FinishedAt) }

func rfc3339(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

// Inspect is crictl inspect of container id.
func (k *Node) Inspect(id string) (Status, error) {
	var s Status
	out, err := k.Crictl("inspect", "-o", "json", id)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return s, fmt.Errorf("kubelet on %s: crictl inspect %s: %w", k.Name, id, err)
	}
	return s, nil
}

// Logs is `crictl logs` of container id: what the container wrote, its
// standard output and error interleaved as the runtime recorded them.
func (k *Node) Logs(id string) (string, error) {
	out, err := exec.Command(k.env["CRICTL"], "logs", id).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubelet on %s: crictl logs %s: %w", k.Name, id, err)
	}
	return string(out), nil
}

// LogFollower reads a container's logs as it writes them (`crictl logs
// -f`), so they are kept when the kubelet removes the container at once
// after it exits, as it does with a static pod whose manifest went.
type LogFollower struct {
	cmd  *exec.Cmd
	buf  bytes.Buffer
	done chan error
}

// FollowLogs starts following container id's logs.
func (k *Node) FollowLogs(id string) (*LogFollower, error) {
	f := &LogFollower{cmd: exec.Command(k.env["CRICTL"], "logs", "-f", id), done: make(chan error, 1)}
	f.cmd.Stdout, f.cmd.Stderr = &f.buf, &f.buf
	if err := f.cmd.Start(); err != nil {
		return nil, fmt.Errorf("kubelet on %s: crictl logs -f %s: %w", k.Name, id, err)
	}
	go func() { f.done <- f.cmd.Wait() }()
	return f, nil
}

// Wait returns what was read once the container's logs ended (it exited),
// or an error after timeout (the follower is stopped then).
func (f *LogFollower) Wait(timeout time.Duration) (string, error) {
	select {
	case err := <-f.done:
		if err != nil {
			return f.buf.String(), fmt.Errorf("crictl logs -f: %w: %s", err, f.buf.String())
		}
		return f.buf.String(), nil
	case <-time.After(timeout):
		_ = f.cmd.Process.Kill()
		<-f.done
		return f.buf.String(), fmt.Errorf("crictl logs -f: the logs did not end within %s", timeout)
	}
}

// Sandboxes counts the pod's sandboxes the runtime has ready.
func (k *Node) Sandboxes() (int, error) {
	out, err := k.Crictl("pods", "-o", "json", "--label", "io.kubernetes.pod.name="+k.PodName())
	if err != nil {
		return 0, err
	}
	var list struct {
		Items []struct {
			State string `json:"state"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return 0, fmt.Errorf("kubelet on %s: crictl pods: %w", k.Name, err)
	}
	n := 0
	for _, p := range list.Items {
		if p.State == "SANDBOX_READY" {
			n++
		}
	}
	return n, nil
}

// Admin GETs path from the pod's admin listener, where the manifest's
// readiness probe reaches it (hostNetwork: the node's own loopback).
func (k *Node) Admin(path string) (string, error) {
	g := k.Pod().Spec.Containers[0].ReadinessProbe.HTTPGet
	if g == nil {
		return "", fmt.Errorf("kubelet on %s: the pod's readiness probe is no httpGet", k.Name)
	}
	return k.get(net.JoinHostPort(g.Host, g.Port.String()), path, g.Scheme == corev1.URISchemeHTTPS)
}

// Clear removes the manifest and waits until the kubelet is done with the
// pod: its sandbox stopped and its folder under the kubelet's root gone
// (the kubelet's housekeeping removes it once the pod worker finished). A
// manifest put then starts at once; one put while the pod's name is still
// held by a terminating pod waits for the kubelet's pod worker back-off
// (10 s, plus up to half of it).
func (k *Node) Clear(ctx context.Context, within time.Duration) error {
	if k.Manifest() != nil {
		if err := k.Remove(); err != nil {
			return err
		}
	}
	return poll(ctx, within, func() error {
		if n, err := k.Sandboxes(); err != nil || n > 0 {
			return fmt.Errorf("%d sandboxes ready (%v)", n, err)
		}
		dirs, err := os.ReadDir(filepath.Join(k.state, "kubelet", "pods"))
		if err == nil && len(dirs) > 0 {
			err = fmt.Errorf("%d pod folders left", len(dirs))
		}
		return err
	})
}
