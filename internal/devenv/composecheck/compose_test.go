package composecheck

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/agatesched/agate/internal/httpserve"
)

// loadProject loads compose.yaml as `docker compose` would, with the Compose specification's
// schema validation and consistency checks on. The environment is empty, so the file's
// defaults are what is checked, whatever the shell running the test has set.
func loadProject(t *testing.T) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{filepath.Join(repoRoot, "compose.yaml")},
		cli.WithWorkingDirectory(repoRoot),
		cli.WithInterpolation(true),
		cli.WithConsistency(true),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("compose.yaml does not load: %v", err)
	}
	return p
}

// env returns a service's environment variable, "" when it is unset.
func env(s types.ServiceConfig, key string) string {
	if v := s.Environment[key]; v != nil {
		return *v
	}
	return ""
}

// envMap is a service's whole environment.
func envMap(s types.ServiceConfig) map[string]string {
	m := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			m[k] = *v
		}
	}
	return m
}

// runs returns the services whose command starts with the given words, sorted by name.
func runs(p *types.Project, words ...string) []types.ServiceConfig {
	var out []types.ServiceConfig
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		if len(s.Command) >= len(words) && slices.Equal([]string(s.Command[:len(words)]), words) {
			out = append(out, s)
		}
	}
	return out
}

// byImage returns the services whose image starts with prefix, sorted by name.
func byImage(p *types.Project, prefix string) []types.ServiceConfig {
	var out []types.ServiceConfig
	for _, name := range p.ServiceNames() {
		if s := p.Services[name]; strings.HasPrefix(s.Image, prefix) {
			out = append(out, s)
		}
	}
	return out
}

func names(ss []types.ServiceConfig) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

func TestComposeServicesExist(t *testing.T) {
	p := loadProject(t)
	for _, want := range []string{"postgres", "nats-1", "nats-2", "nats-3", "jaeger", "scheduler-1", "scheduler-2", "worker"} {
		if _, ok := p.Services[want]; !ok {
			t.Errorf("no service %q (services: %v)", want, p.ServiceNames())
		}
	}
	if got := runs(p, "scheduler", "run"); len(got) < 2 {
		t.Errorf("%d services run `scheduler run` (%v); want two nodes", len(got), names(got))
	}
	workers := 0
	for _, s := range runs(p, "worker") {
		workers += s.GetScale()
	}
	if workers < 2 {
		t.Errorf("%d worker containers; want several", workers)
	}
	if got := byImage(p, "nats:"); len(got) != 3 {
		t.Errorf("%d NATS servers (%v); want a cluster of three", len(got), names(got))
	}
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		if s.Name == "migrate" {
			continue // one-shot
		}
		if s.Restart == "" || s.Restart == types.RestartPolicyNo {
			t.Errorf("service %s has no restart policy", name)
		}
	}
}

func TestComposePostgres(t *testing.T) {
	p := loadProject(t)
	pg, ok := p.Services["postgres"]
	if !ok {
		t.Fatal("no postgres service")
	}
	if !strings.HasPrefix(pg.Image, "postgres:15") {
		t.Errorf("postgres image %q; want PostgreSQL 15", pg.Image)
	}
	if env(pg, "POSTGRES_PASSWORD") == "" {
		t.Error("POSTGRES_PASSWORD has no (dev) default")
	}
	if pg.HealthCheck == nil || len(pg.HealthCheck.Test) == 0 || !slices.Contains(pg.HealthCheck.Test, "pg_isready") {
		t.Errorf("postgres healthcheck %v; want pg_isready", pg.HealthCheck)
	}
	if !hasNamedVolume(p, pg, "/var/lib/postgresql/data") {
		t.Error("postgres data is not on a named volume")
	}
}

// hasNamedVolume reports whether target is a named volume declared at the top level.
func hasNamedVolume(p *types.Project, s types.ServiceConfig, target string) bool {
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeVolume && v.Target == target {
			_, declared := p.Volumes[v.Source]
			return declared
		}
	}
	return false
}

// natsNode is a NATS service with the configuration it runs.
type natsNode struct {
	svc  types.ServiceConfig
	opts *server.Options
}

// natsNodes loads the configuration each NATS service mounts, with that service's environment.
func natsNodes(t *testing.T, p *types.Project) []natsNode {
	t.Helper()
	var out []natsNode
	for _, s := range byImage(p, "nats:") {
		i := slices.IndexFunc(s.Command, func(a string) bool { return a == "--config" || a == "-c" })
		if i < 0 || i+1 >= len(s.Command) {
			t.Errorf("%s: command %v names no --config", s.Name, s.Command)
			continue
		}
		target := s.Command[i+1]
		var source string
		for _, v := range s.Volumes {
			if v.Target == target && v.Type == types.VolumeTypeBind {
				source = v.Source
			}
		}
		if source == "" {
			t.Errorf("%s: nothing is mounted at its config path %s", s.Name, target)
			continue
		}
		if abs, _ := filepath.Abs(natsConf); source != abs {
			t.Errorf("%s mounts %s; the tests check %s", s.Name, source, abs)
		}
		opts := loadNATSConf(t, envMap(s))
		out = append(out, natsNode{svc: s, opts: opts})
	}
	return out
}

func TestComposeNATSCluster(t *testing.T) {
	p := loadProject(t)
	nodes := natsNodes(t, p)
	seen := map[string]string{}
	for _, n := range nodes {
		s, o := n.svc, n.opts
		if !o.JetStream {
			t.Errorf("%s: JetStream is not enabled", s.Name)
		}
		if other, dup := seen[o.ServerName]; dup || o.ServerName == "" {
			t.Errorf("%s: server name %q (also %s); each node needs its own", s.Name, o.ServerName, other)
		}
		seen[o.ServerName] = s.Name
		if !hasNamedVolume(p, s, o.StoreDir) {
			t.Errorf("%s: JetStream store_dir %s is not on a named volume", s.Name, o.StoreDir)
		}
		var routes []string
		for _, r := range o.Routes {
			routes = append(routes, r.Host)
		}
		for _, peer := range nodes {
			if want := fmt.Sprintf("%s:%d", peer.svc.Name, o.Cluster.Port); !slices.Contains(routes, want) {
				t.Errorf("%s: no route to %s (routes %v)", s.Name, want, routes)
			}
		}
		if s.HealthCheck == nil || len(s.HealthCheck.Test) == 0 {
			t.Errorf("%s: no healthcheck", s.Name)
		}
	}
}

// checkNATSURL checks that a client's NATS_URL lists every NATS service, on their client port,
// as the given user with that user's password.
func checkNATSURL(t *testing.T, client string, natsURL, user string, nodes []natsNode) {
	t.Helper()
	if natsURL == "" {
		t.Errorf("%s: no NATS_URL", client)
		return
	}
	if len(nodes) == 0 {
		t.Fatal("no NATS services")
	}
	var password string
	for _, u := range nodes[0].opts.Users {
		if u.Username == user {
			password = u.Password
		}
	}
	var hosts []string
	for _, raw := range strings.Split(natsURL, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil {
			t.Errorf("%s: NATS_URL %q: %v", client, raw, err)
			continue
		}
		hosts = append(hosts, u.Host)
		pw, _ := u.User.Password()
		if u.User.Username() != user || pw != password {
			t.Errorf("%s: NATS_URL connects as %q with a password that is not the NATS user %q's", client, u.User.Username(), user)
		}
	}
	for _, n := range nodes {
		if want := net.JoinHostPort(n.svc.Name, fmt.Sprint(n.opts.Port)); !slices.Contains(hosts, want) {
			t.Errorf("%s: NATS_URL does not list %s (lists %v)", client, want, hosts)
		}
	}
}

// checkOTLP checks that a client exports traces to the Jaeger service's OTLP/HTTP port.
func checkOTLP(t *testing.T, p *types.Project, s types.ServiceConfig) {
	t.Helper()
	raw := env(s, "OTEL_EXPORTER_OTLP_ENDPOINT")
	u, err := url.Parse(raw)
	if raw == "" || err != nil {
		t.Errorf("%s: OTEL_EXPORTER_OTLP_ENDPOINT %q: %v", s.Name, raw, err)
		return
	}
	j, ok := p.Services[u.Hostname()]
	if !ok || !strings.Contains(j.Image, "jaeger") {
		t.Errorf("%s: OTLP endpoint %s is not the Jaeger service", s.Name, raw)
	}
	if u.Port() != "4318" {
		t.Errorf("%s: OTLP endpoint %s; want OTLP/HTTP on port 4318", s.Name, raw)
	}
	if env(s, "OTEL_SERVICE_NAME") == "" {
		t.Errorf("%s: no OTEL_SERVICE_NAME", s.Name)
	}
}

// checkDependsHealthy checks that s waits for each target to be healthy.
func checkDependsHealthy(t *testing.T, s types.ServiceConfig, targets ...string) {
	t.Helper()
	for _, target := range targets {
		d, ok := s.DependsOn[target]
		if !ok {
			t.Errorf("%s does not depend on %s", s.Name, target)
		} else if d.Condition != types.ServiceConditionHealthy {
			t.Errorf("%s starts when %s is %s; want service_healthy", s.Name, target, d.Condition)
		}
	}
}

func TestComposeSchedulers(t *testing.T) {
	p := loadProject(t)
	nodes := natsNodes(t, p)
	pg := p.Services["postgres"]
	ids := map[string]string{}
	for _, s := range runs(p, "scheduler", "run") {
		id := env(s, "AGATE_INSTANCE_ID")
		if other, dup := ids[id]; dup || id == "" {
			t.Errorf("%s: AGATE_INSTANCE_ID %q (also %s); each node needs its own", s.Name, id, other)
		}
		ids[id] = s.Name
		if s.GetScale() != 1 {
			t.Errorf("%s: scale %d would run nodes with the same instance id", s.Name, s.GetScale())
		}

		db, err := url.Parse(env(s, "DATABASE_URL"))
		switch {
		case err != nil || env(s, "DATABASE_URL") == "":
			t.Errorf("%s: DATABASE_URL %q: %v", s.Name, env(s, "DATABASE_URL"), err)
		case db.Scheme != "postgres" && db.Scheme != "postgresql":
			t.Errorf("%s: DATABASE_URL scheme %q", s.Name, db.Scheme)
		case db.Hostname() != pg.Name:
			t.Errorf("%s: DATABASE_URL host %q; want the %s service", s.Name, db.Hostname(), pg.Name)
		default:
			pw, _ := db.User.Password()
			if db.User.Username() != env(pg, "POSTGRES_USER") || pw != env(pg, "POSTGRES_PASSWORD") ||
				strings.TrimPrefix(db.Path, "/") != env(pg, "POSTGRES_DB") {
				t.Errorf("%s: DATABASE_URL user, password or database differ from the postgres service's", s.Name)
			}
		}
		checkNATSURL(t, s.Name, env(s, "NATS_URL"), "scheduler", nodes)
		// Streams on one server of the cluster would be lost with it: one replica per server,
		// up to three.
		if got, want := env(s, "AGATE_STREAM_REPLICAS"), strconv.Itoa(min(len(nodes), 3)); got != want {
			t.Errorf("%s: AGATE_STREAM_REPLICAS %q; want %s for %d NATS servers", s.Name, got, want, len(nodes))
		}
		checkOTLP(t, p, s)
		checkDependsHealthy(t, s, append([]string{pg.Name}, names(byImage(p, "nats:"))...)...)
	}
}

func TestComposeWorkers(t *testing.T) {
	p := loadProject(t)
	nodes := natsNodes(t, p)
	for _, s := range runs(p, "worker") {
		checkNATSURL(t, s.Name, env(s, "NATS_URL"), "worker", nodes)
		checkOTLP(t, p, s)
		checkDependsHealthy(t, s, names(byImage(p, "nats:"))...)
		if s.GetScale() > 1 && env(s, "AGATE_INSTANCE_ID") != "" {
			t.Errorf("%s: %d replicas share AGATE_INSTANCE_ID %q", s.Name, s.GetScale(), env(s, "AGATE_INSTANCE_ID"))
		}
	}
}

func TestComposeJaeger(t *testing.T) {
	p := loadProject(t)
	j, ok := p.Services["jaeger"]
	if !ok {
		t.Fatal("no jaeger service")
	}
	if !strings.Contains(j.Image, "jaeger") || !strings.Contains(j.Image, "all-in-one") {
		t.Errorf("jaeger image %q; want Jaeger all-in-one", j.Image)
	}
	var ports []uint32
	for _, port := range j.Ports {
		ports = append(ports, port.Target)
	}
	for _, want := range []uint32{16686, 4318} {
		if !slices.Contains(ports, want) {
			t.Errorf("jaeger does not publish port %d (publishes %v)", want, ports)
		}
	}
	if v := env(j, "COLLECTOR_OTLP_ENABLED"); v != "" && v != "true" {
		t.Errorf("COLLECTOR_OTLP_ENABLED=%s", v)
	}
}

// TestComposeImages checks that every Agate service is built from this repository's Dockerfile
// and runs a binary that the Dockerfile builds.
func TestComposeImages(t *testing.T) {
	p := loadProject(t)
	all := stages(parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile")))
	var built []string
	for _, st := range all {
		built = append(built, builtCommands(t, st)...)
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	agate := append(runs(p, "scheduler"), runs(p, "worker")...)
	if len(agate) == 0 {
		t.Fatal("no service runs scheduler or worker")
	}
	for _, s := range agate {
		if !slices.Contains(built, s.Command[0]) {
			t.Errorf("%s runs %q, which the Dockerfile does not build (%v)", s.Name, s.Command[0], built)
		}
		if s.Build == nil {
			t.Errorf("%s has no build section", s.Name)
			continue
		}
		if s.Build.Context != root {
			t.Errorf("%s builds from %s; want the repository root %s", s.Name, s.Build.Context, root)
		}
		df := s.Build.Dockerfile
		if df == "" {
			df = "Dockerfile"
		}
		if !filepath.IsAbs(df) {
			df = filepath.Join(s.Build.Context, df)
		}
		if filepath.Clean(df) != filepath.Join(root, "Dockerfile") {
			t.Errorf("%s builds %s; want the repository's Dockerfile", s.Name, df)
		} else if _, err := os.Stat(df); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
}

// TestComposeDependencies checks every depends_on: the target exists, and a health condition
// names a service that has a healthcheck (else `up` waits forever).
func TestComposeDependencies(t *testing.T) {
	p := loadProject(t)
	for _, name := range p.ServiceNames() {
		for target, d := range p.Services[name].DependsOn {
			ts, ok := p.Services[target]
			if !ok {
				t.Errorf("%s depends on %s, which is not a service", name, target)
				continue
			}
			switch d.Condition {
			case types.ServiceConditionHealthy:
				if ts.HealthCheck == nil || ts.HealthCheck.Disable || len(ts.HealthCheck.Test) == 0 {
					t.Errorf("%s waits for %s to be healthy, but %s has no healthcheck", name, target, target)
				}
			case types.ServiceConditionCompletedSuccessfully:
				if ts.Restart == types.RestartPolicyAlways || ts.Restart == types.RestartPolicyUnlessStopped {
					t.Errorf("%s waits for %s to complete, but %s restarts (%s)", name, target, target, ts.Restart)
				}
			}
		}
	}
}

// TestComposeHealthchecks checks that every scheduler node and worker serves HTTP
// (AGATE_HTTP_ADDR) and that its health check is its binary's healthcheck command, which asks
// /readyz on that address: the image has no shell or HTTP client.
func TestComposeHealthchecks(t *testing.T) {
	p := loadProject(t)
	agate := append(runs(p, "scheduler", "run"), runs(p, "worker")...)
	if len(agate) == 0 {
		t.Fatal("no service runs scheduler run or worker")
	}
	for _, s := range agate {
		addr := env(s, "AGATE_HTTP_ADDR")
		if _, err := httpserve.ListenAddr(addr); err != nil {
			t.Errorf("%s: AGATE_HTTP_ADDR %q: %v", s.Name, addr, err)
		}
		hc := s.HealthCheck
		want := []string{"CMD", s.Command[0], "healthcheck"}
		if hc == nil || hc.Disable || !slices.Equal([]string(hc.Test), want) {
			t.Errorf("%s: healthcheck %v; want test %v", s.Name, hc, want)
			continue
		}
		if hc.Timeout == nil || hc.Interval == nil || time.Duration(*hc.Timeout) <= 3*time.Second {
			t.Errorf("%s: healthcheck timeout %v; want an interval and a timeout above the command's own 3s", s.Name, hc.Timeout)
		}
	}
}
