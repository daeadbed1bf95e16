package composecheck

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"
)

var (
	promDir    = filepath.Join(repoRoot, "deploy", "prometheus")
	grafanaDir = filepath.Join(repoRoot, "deploy", "grafana")
)

// readYAML parses the YAML file path into v, failing the test when it does not parse.
func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s does not parse: %v", path, err)
	}
}

// service returns the compose service name, failing the test when there is none.
func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	if !ok {
		t.Fatalf("no service %q (services: %v)", name, p.ServiceNames())
	}
	return s
}

// checkPinned fails unless image names a fixed version: a tag with a digit, not latest.
func checkPinned(t *testing.T, s types.ServiceConfig, repo string) {
	t.Helper()
	name, tag, ok := strings.Cut(s.Image, ":")
	if name != repo || !ok || tag == "latest" || !strings.ContainsAny(tag, "0123456789") {
		t.Errorf("%s: image %q; want %s at a pinned version", s.Name, s.Image, repo)
	}
}

// checkMount fails unless s mounts the repository file or folder src (relative to the root) at
// target, and src exists.
func checkMount(t *testing.T, s types.ServiceConfig, src, target string) {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(root, src)
	if !slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool {
		return v.Type == types.VolumeTypeBind && filepath.Clean(v.Source) == want && v.Target == target
	}) {
		t.Errorf("%s does not mount %s at %s", s.Name, src, target)
	}
	if _, err := os.Stat(want); err != nil {
		t.Errorf("%s: %v", s.Name, err)
	}
}

// promConfig is the part of prometheus.yml the tests read.
type promConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
		DNSSDConfigs []struct {
			Names []string `yaml:"names"`
			Type  string   `yaml:"type"`
			Port  int      `yaml:"port"`
		} `yaml:"dns_sd_configs"`
	} `yaml:"scrape_configs"`
}

// TestComposePrometheus checks that Prometheus runs a pinned image with this repository's
// configuration and rules, and scrapes every scheduler node and worker on the port of its
// AGATE_HTTP_ADDR: a scheduler service (one container) by a static target, a scaled worker
// service by a DNS lookup of its name, which finds every replica (a static target would reach
// one of them).
func TestComposePrometheus(t *testing.T) {
	p := loadProject(t)
	prom := service(t, p, "prometheus")
	checkPinned(t, prom, "prom/prometheus")
	checkMount(t, prom, "deploy/prometheus/prometheus.yml", "/etc/prometheus/prometheus.yml")
	checkMount(t, prom, "deploy/prometheus/alerts.yml", "/etc/prometheus/alerts.yml")

	var cfg promConfig
	readYAML(t, filepath.Join(promDir, "prometheus.yml"), &cfg)
	if !slices.Equal(cfg.RuleFiles, []string{"/etc/prometheus/alerts.yml"}) {
		t.Errorf("rule_files %v; want the mounted alerts.yml", cfg.RuleFiles)
	}
	static, dns := map[string]bool{}, map[string]bool{} // host:port
	for _, sc := range cfg.ScrapeConfigs {
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("job %s scrapes %s; want /metrics", sc.JobName, sc.MetricsPath)
		}
		for _, c := range sc.StaticConfigs {
			for _, tg := range c.Targets {
				static[tg] = true
			}
		}
		for _, c := range sc.DNSSDConfigs {
			if c.Type != "A" {
				t.Errorf("job %s: dns_sd type %q; want A (compose's DNS has no SRV records)", sc.JobName, c.Type)
			}
			for _, n := range c.Names {
				dns[net.JoinHostPort(n, strconv.Itoa(c.Port))] = true
			}
		}
	}
	agate := append(runs(p, "scheduler", "run"), runs(p, "worker")...)
	if len(agate) == 0 {
		t.Fatal("no service runs scheduler run or worker")
	}
	for _, s := range agate {
		_, port, err := net.SplitHostPort(env(s, "AGATE_HTTP_ADDR"))
		if err != nil {
			t.Errorf("%s: AGATE_HTTP_ADDR: %v", s.Name, err)
			continue
		}
		target := net.JoinHostPort(s.Name, port)
		switch {
		case s.GetScale() > 1 && !dns[target]:
			t.Errorf("%s has %d replicas but is not found by a dns_sd_config for %s", s.Name, s.GetScale(), target)
		case s.GetScale() <= 1 && !static[target] && !dns[target]:
			t.Errorf("%s is not a scrape target (%s)", s.Name, target)
		}
	}
}

// alertRules is the rule file's shape.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// TestAlertRules checks that every alert has an expression, a severity and a summary, and that
// the expressions use only metrics the code exports. promtool, where installed, checks the
// PromQL too (Debian's prometheus package has it).
func TestAlertRules(t *testing.T) {
	path := filepath.Join(promDir, "alerts.yml")
	var rules alertRules
	readYAML(t, path, &rules)
	exported := exportedMetrics(t)
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" || strings.TrimSpace(r.Expr) == "" {
				t.Errorf("group %s: a rule without alert name or expr: %+v", g.Name, r)
			}
			if r.Labels["severity"] == "" {
				t.Errorf("alert %s has no severity label", r.Alert)
			}
			if strings.TrimSpace(r.Annotations["summary"]) == "" {
				t.Errorf("alert %s has no summary", r.Alert)
			}
			checkMetricNames(t, "alert "+r.Alert, r.Expr, exported)
		}
	}
	if n == 0 {
		t.Fatal("alerts.yml has no rules")
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
			t.Errorf("promtool check rules: %v\n%s", err, out)
		}
	} else {
		t.Log("promtool not installed: PromQL syntax not checked")
	}
}

// TestGrafanaProvisioning checks that Grafana runs a pinned image with the provisioning of
// deploy/grafana, that its data source is the compose network's Prometheus, and that the
// dashboards parse and query only metrics the code exports.
func TestGrafanaProvisioning(t *testing.T) {
	p := loadProject(t)
	g := service(t, p, "grafana")
	checkPinned(t, g, "grafana/grafana")
	checkMount(t, g, "deploy/grafana/provisioning", "/etc/grafana/provisioning")
	checkMount(t, g, "deploy/grafana/dashboards", "/var/lib/grafana/dashboards")
	if env(g, "GF_AUTH_ANONYMOUS_ENABLED") != "true" || env(g, "GF_SECURITY_ADMIN_PASSWORD") == "" {
		t.Errorf("grafana: want anonymous viewers and an admin password from the environment")
	}

	var ds struct {
		Datasources []struct {
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
			UID  string `yaml:"uid"`
		} `yaml:"datasources"`
	}
	readYAML(t, filepath.Join(grafanaDir, "provisioning", "datasources", "prometheus.yml"), &ds)
	prom := service(t, p, "prometheus")
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" ||
		ds.Datasources[0].URL != "http://"+prom.Name+":9090" {
		t.Errorf("datasources %+v; want one of type prometheus at http://%s:9090", ds.Datasources, prom.Name)
	}

	var prov struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, filepath.Join(grafanaDir, "provisioning", "dashboards", "agate.yml"), &prov)
	if len(prov.Providers) != 1 || prov.Providers[0].Options.Path != "/var/lib/grafana/dashboards" {
		t.Errorf("dashboard providers %+v; want one reading the mounted /var/lib/grafana/dashboards", prov.Providers)
	}

	dashboards, err := filepath.Glob(filepath.Join(grafanaDir, "dashboards", "*.json"))
	if err != nil || len(dashboards) == 0 {
		t.Fatalf("no dashboard under deploy/grafana/dashboards (%v)", err)
	}
	exported := exportedMetrics(t)
	for _, path := range dashboards {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			UID    string `json:"uid"`
			Panels []struct {
				Title      string `json:"title"`
				Datasource struct {
					UID string `json:"uid"`
				} `json:"datasource"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s does not parse: %v", path, err)
		}
		if d.UID == "" || len(d.Panels) == 0 {
			t.Errorf("%s: uid %q, %d panels; want a uid and panels", path, d.UID, len(d.Panels))
		}
		for _, pn := range d.Panels {
			if pn.Datasource.UID != ds.Datasources[0].UID {
				t.Errorf("%s: panel %q uses data source %q; want %q", path, pn.Title, pn.Datasource.UID, ds.Datasources[0].UID)
			}
			if len(pn.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", path, pn.Title)
			}
			for _, tg := range pn.Targets {
				checkMetricNames(t, "panel "+pn.Title, tg.Expr, exported)
			}
		}
	}
}

var agateName = regexp.MustCompile(`\bagate_[a-z0-9_]+`)

// checkMetricNames fails for each agate_* name in the PromQL expr that exported lacks.
func checkMetricNames(t *testing.T, where, expr string, exported map[string]bool) {
	t.Helper()
	for _, name := range agateName.FindAllString(expr, -1) {
		if !exported[name] {
			t.Errorf("%s uses %s, which no instrument exports", where, name)
		}
	}
}

// exportedMetrics returns the Prometheus names of the instruments the code creates through
// internal/telemetry's helpers, read from the source: each call's literal name and unit give
// the name as the exporter writes it (telemetry.NewPrometheus: dots become underscores, "s"
// adds _seconds, counters add _total, histograms have _bucket, _sum and _count series). A
// helper or instrument created otherwise is not seen, so a dashboard using it fails here.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(filepath.Join(repoRoot, "internal"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 3 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "telemetry" {
				return true
			}
			name, ok1 := stringLit(call.Args[1])
			unit, ok2 := stringLit(call.Args[2])
			if !ok1 || !ok2 {
				return true
			}
			base := strings.ReplaceAll(name, ".", "_")
			if unit == "s" {
				base += "_seconds"
			}
			switch sel.Sel.Name {
			case "Counter", "ObservableCounter":
				out[base+"_total"] = true
			case "Histogram":
				out[base+"_bucket"], out[base+"_sum"], out[base+"_count"] = true, true, true
			case "ObservableUpDownCounter", "Gauge":
				out[base] = true
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"agate_scheduler_fires_total", "agate_worker_run_duration_seconds_bucket", "agate_worker_jobs_in_flight"} {
		if !out[want] {
			t.Fatalf("reading the instruments from the source found %v, without %s", out, want)
		}
	}
	return out
}

func stringLit(e ast.Expr) (string, bool) {
	l, ok := e.(*ast.BasicLit)
	if !ok || l.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(l.Value)
	return s, err == nil
}
