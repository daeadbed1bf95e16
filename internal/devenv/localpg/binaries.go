package localpg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// ErrNoBinaries is returned (wrapped) by [Start] when no PostgreSQL server
// binaries can be found on the machine.
var ErrNoBinaries = errors.New("PostgreSQL server binaries (initdb, pg_ctl, postgres) not found; " +
	"run scripts/ensure-postgres.sh (or `apt-get install -y postgresql`)")

// serverBinaries are the programs Start needs from one installation.
var serverBinaries = []string{"initdb", "pg_ctl", "postgres"}

// FindBinDir returns the directory holding the PostgreSQL server programs.
// It asks `pg_config --bindir` first, then looks for the newest Debian-style
// /usr/lib/postgresql/<major>/bin, then searches PATH. Debian does not put the
// server programs on PATH, and pg_config may come from libpq-dev without a
// server, so every candidate is checked for initdb, pg_ctl and postgres.
func FindBinDir(ctx context.Context) (string, error) {
	var tried []string

	if out, err := exec.CommandContext(ctx, "pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if hasServerBinaries(dir) {
			return dir, nil
		}
		tried = append(tried, dir+" (from pg_config --bindir)")
	}

	if dir := newestDebianBinDir("/usr/lib/postgresql"); dir != "" {
		return dir, nil
	}
	tried = append(tried, "/usr/lib/postgresql/<major>/bin")

	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if hasServerBinaries(dir) {
			return dir, nil
		}
	}
	tried = append(tried, "PATH")

	return "", fmt.Errorf("%w (looked in %s)", ErrNoBinaries, strings.Join(tried, ", "))
}

func hasServerBinaries(dir string) bool {
	if dir == "" {
		return false
	}
	for _, name := range serverBinaries {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// newestDebianBinDir returns root/<major>/bin for the highest numeric major
// that has the server programs, or "" if there is none.
func newestDebianBinDir(root string) string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return ""
	}
	var majors []float64
	byMajor := map[float64]string{}
	for _, e := range entries {
		// Majors before 10 are spelled "9.6", so parse as a float.
		v, err := strconv.ParseFloat(e.Name(), 64)
		if err != nil {
			continue
		}
		dir := filepath.Join(root, e.Name(), "bin")
		if hasServerBinaries(dir) {
			majors = append(majors, v)
			byMajor[v] = dir
		}
	}
	if len(majors) == 0 {
		return ""
	}
	sort.Float64s(majors)
	return byMajor[majors[len(majors)-1]]
}

var versionRE = regexp.MustCompile(`\(PostgreSQL\) (\d+)(?:\.(\d+))?`)

// serverMajor returns the major version of the installation in binDir, in
// the form PostgreSQL writes to PG_VERSION ("15", or "9.6" for old ones).
func serverMajor(ctx context.Context, binDir string) (string, error) {
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "pg_ctl"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("run %s/pg_ctl --version: %w", binDir, err)
	}
	m := versionRE.FindStringSubmatch(string(out))
	if m == nil {
		return "", fmt.Errorf("unrecognised pg_ctl --version output %q", strings.TrimSpace(string(out)))
	}
	if major, _ := strconv.Atoi(m[1]); major < 10 && m[2] != "" {
		return m[1] + "." + m[2], nil
	}
	return m[1], nil
}
