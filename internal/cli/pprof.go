package cli

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"
)

// PprofEnv names the environment variable that makes a binary serve Go's profiles
// (/debug/pprof/) on the address it holds, e.g. 127.0.0.1:6060: for profiling a process under
// load (agatebench sets it on its scheduler and worker processes). Unset, nothing listens.
const PprofEnv = "AGATE_PPROF_ADDR"

// ServePprof serves the profiles on $AGATE_PPROF_ADDR until ctx ends; it does nothing when the
// variable is unset.
func ServePprof(ctx context.Context, log *slog.Logger) error {
	addr := os.Getenv(PprofEnv)
	if addr == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof listener stopped", slog.Any("error", err))
		}
	}()
	log.Info("serving profiles", slog.String("addr", l.Addr().String()))
	return nil
}
