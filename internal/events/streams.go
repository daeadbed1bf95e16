package events

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of [StreamSettings] (docs/contract.md, "Streams and consumers").
const (
	// StreamReplicasDefault suits a single JetStream server; a cluster of three or more servers
	// wants 3, so that every stream survives the loss of one.
	StreamReplicasDefault = 1
	// StreamMaxAgeDefault keeps a week: workers stopped over a long weekend still find their
	// fires, and EVENTS holds a week of history for dashboards and audit.
	StreamMaxAgeDefault = 7 * 24 * time.Hour
	// StreamMaxBytesDefault, 0, caps no stream by size. A cap drops a stream's oldest messages
	// once reached, consumed or not, so a backlog of fires or commands larger than the cap would
	// be lost; the age bounds each stream, and the server's JetStream storage limit
	// (max_file_store) bounds them all.
	StreamMaxBytesDefault = 0
	// DuplicateWindowDefault is JetStream's own default: it covers a publisher's retries and the
	// outbox sweep's republishing (seconds after a missed publish).
	DuplicateWindowDefault = 2 * time.Minute
	// streamMaxReplicas and duplicateWindowMin are JetStream's limits.
	streamMaxReplicas  = 5
	duplicateWindowMin = 100 * time.Millisecond
)

// StreamSettings are the limits of a namespace's four streams, the same for each. Zero fields
// take the defaults above. A scheduler node applies its settings at start ([EnsureStreamsWith]),
// so every node of a namespace should be given the same ones: the last node started wins, and
// logs what it changed.
type StreamSettings struct {
	// Replicas is how many JetStream servers store each stream: at most the number of servers
	// in the cluster (1 without a cluster), at most 5.
	Replicas int
	// MaxAge is how long a stream keeps a message, consumed or not.
	MaxAge time.Duration
	// MaxBytes caps the size of each stream (so the four together hold up to 4 × MaxBytes); 0
	// sets no cap. A full stream drops its oldest messages, consumed or not: size it well above
	// the largest backlog of fires, commands or completions expected.
	MaxBytes int64
	// DuplicateWindow is how long JetStream remembers a Nats-Msg-Id to drop a second message
	// carrying it; at most MaxAge.
	DuplicateWindow time.Duration
}

// withDefaults fills the zero fields.
func (s StreamSettings) withDefaults() StreamSettings {
	s.Replicas = cmp.Or(s.Replicas, StreamReplicasDefault)
	s.MaxAge = cmp.Or(s.MaxAge, StreamMaxAgeDefault)
	s.DuplicateWindow = cmp.Or(s.DuplicateWindow, DuplicateWindowDefault)
	return s
}

// Validate checks settings from flags or the environment against JetStream's rules, so that a
// mistake is reported at start with the setting's name rather than by the server.
func (s StreamSettings) Validate() error {
	if s.Replicas < 0 || s.Replicas > streamMaxReplicas {
		return fmt.Errorf("stream replicas %d: JetStream stores a stream on 1 to %d servers", s.Replicas, streamMaxReplicas)
	}
	if s.MaxAge < 0 || s.MaxBytes < 0 || s.DuplicateWindow < 0 {
		return errors.New("stream max age, max bytes and duplicate window must not be negative")
	}
	d := s.withDefaults()
	if d.DuplicateWindow < duplicateWindowMin || d.DuplicateWindow > d.MaxAge {
		return fmt.Errorf("stream duplicate window %s must be between %s and the stream max age (%s)",
			d.DuplicateWindow, duplicateWindowMin, d.MaxAge)
	}
	return nil
}

// config is the configuration of one of the namespace's streams with these settings.
func (s StreamSettings) config(name, subject string) jetstream.StreamConfig {
	maxBytes := s.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1 // JetStream's "no limit"
	}
	return jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage,
		Retention: jetstream.LimitsPolicy, Replicas: s.Replicas, MaxAge: s.MaxAge, MaxBytes: maxBytes,
		Duplicates: s.DuplicateWindow}
}

// EnsureStreams is [EnsureStreamsWith] the default settings and slog's default logger.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, ns string) error {
	return EnsureStreamsWith(ctx, js, ns, StreamSettings{}, nil)
}

// EnsureStreamsWith creates the four streams of a namespace with the given settings, or brings
// existing ones to them: what JetStream can change is updated, each change logged at Info; what
// it cannot (the storage type, or an update the server refuses) is an error naming the stream,
// the setting, both values and what to do. Any node may call it at start, several at once.
func EnsureStreamsWith(ctx context.Context, js jetstream.JetStream, ns string, set StreamSettings, log *slog.Logger) error {
	if err := set.Validate(); err != nil {
		return err
	}
	set = set.withDefaults()
	log = cmp.Or(log, slog.Default())
	s := Subjects(ns)
	for _, cfg := range []jetstream.StreamConfig{
		set.config(StreamCommands(ns), s.All("cmd")),
		set.config(StreamFired(ns), s.All("fired")),
		set.config(StreamDone(ns), s.All("done")),
		set.config(StreamEvents(ns), s.All("evt")),
	} {
		if err := ensureStream(ctx, js, cfg, log); err != nil {
			return err
		}
	}
	return nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, log *slog.Logger) error {
	stream, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err = js.CreateStream(ctx, want); err == nil {
			log.InfoContext(ctx, "created JetStream stream", slog.String("stream", want.Name),
				slog.Int("replicas", want.Replicas), slog.Duration("max_age", want.MaxAge),
				slog.Int64("max_bytes", want.MaxBytes), slog.Duration("duplicate_window", want.Duplicates))
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Advice for the settings that differ from the defaults, which a server takes.
			defaults := StreamSettings{}.withDefaults().config(want.Name, want.Subjects[0])
			return refused(want.Name, fmt.Errorf("creating JetStream stream %s: %w; %s", want.Name, err,
				advice(streamDiffs(defaults, want))))
		}
		// Another node created it meanwhile, with other settings: compare with those.
		stream, err = js.Stream(ctx, want.Name)
	}
	if err != nil {
		return fmt.Errorf("looking up JetStream stream %s: %w", want.Name, err)
	}
	have := stream.CachedInfo().Config
	diffs := streamDiffs(have, want)
	if len(diffs) == 0 {
		return nil
	}
	if i := slices.IndexFunc(diffs, func(d streamDiff) bool { return d.setting == "storage" }); i >= 0 {
		return &SettingsError{Stream: want.Name, err: fmt.Errorf("JetStream stream %s has storage %s, Agate's streams are "+
			"stored in %s, and JetStream cannot change a stream's storage: once its consumers have caught up, delete "+
			"the stream (nats stream rm %s; its messages are lost) and start a scheduler node to create it again",
			want.Name, diffs[i].have, diffs[i].want, want.Name)}
	}
	// Only the settings Agate owns change; anything else set on the stream (placement,
	// compression, ...) stays as the operator left it.
	upd := have
	upd.Subjects, upd.Storage, upd.Retention = want.Subjects, want.Storage, want.Retention
	upd.Replicas, upd.MaxAge, upd.MaxBytes, upd.Duplicates = want.Replicas, want.MaxAge, want.MaxBytes, want.Duplicates
	updated, err := js.UpdateStream(ctx, upd)
	if err != nil {
		return refused(want.Name, fmt.Errorf("JetStream refused to update stream %s (%s): %w; %s", want.Name,
			describe(diffs), err, advice(diffs)))
	}
	// A server that took the update but kept a value would leave the stream silently off.
	if left := streamDiffs(updated.CachedInfo().Config, want); len(left) > 0 {
		return &SettingsError{Stream: want.Name, err: fmt.Errorf("JetStream updated stream %s but kept %s; %s",
			want.Name, describe(left), advice(left))}
	}
	for _, d := range diffs {
		log.InfoContext(ctx, "changed a setting of a JetStream stream", slog.String("stream", want.Name),
			slog.String("setting", d.setting), slog.String("from", d.have), slog.String("to", d.want))
	}
	return nil
}

// SettingsError reports stream settings that JetStream cannot apply as asked: trying again does
// not help until the operator acts, as the message says. Other errors of [EnsureStreamsWith]
// (NATS unreachable, a cluster electing its leader or missing peers) may pass.
type SettingsError struct {
	Stream string // the stream's name
	err    error
}

func (e *SettingsError) Error() string { return e.err.Error() }
func (e *SettingsError) Unwrap() error { return e.err }

// settingsErrorCodes are the JetStream API errors about a configuration itself, which waiting
// does not change (nats-server's jetstream_errors_generated.go).
var settingsErrorCodes = []jetstream.ErrorCode{
	10028, // insufficient memory resources
	10047, // insufficient storage resources
	10052, // invalid stream configuration
	10061, // replicas cannot be updated
	10065, // subjects overlap with an existing stream
	10074, // replicas > 1 not supported in non-clustered mode
	10113, // the account requires max bytes
	10122, // max bytes above the account's limit per stream
}

// refused is err, a [SettingsError] when the server's answer was about the configuration.
func refused(stream string, err error) error {
	var api *jetstream.APIError
	if errors.As(err, &api) && slices.Contains(settingsErrorCodes, api.ErrorCode) {
		return &SettingsError{Stream: stream, err: err}
	}
	return err
}

// streamDiff is one setting Agate owns whose value on the server differs from the wanted one.
type streamDiff struct {
	setting, have, want string
}

// streamDiffs compares the settings Agate owns; JetStream's equivalent spellings (0 replicas for
// 1, 0 max bytes for -1) compare equal.
func streamDiffs(have, want jetstream.StreamConfig) []streamDiff {
	var out []streamDiff
	add := func(setting string, h, w any) {
		if h != w {
			out = append(out, streamDiff{setting, fmt.Sprint(h), fmt.Sprint(w)})
		}
	}
	add("subjects", strings.Join(have.Subjects, ","), strings.Join(want.Subjects, ","))
	add("storage", have.Storage, want.Storage)
	add("retention", have.Retention, want.Retention)
	add("replicas", max(have.Replicas, 1), max(want.Replicas, 1))
	add("max age", have.MaxAge, want.MaxAge)
	add("max bytes", bytesLimit(have.MaxBytes), bytesLimit(want.MaxBytes))
	add("duplicate window", have.Duplicates, want.Duplicates)
	return out
}

// bytesLimit shows a MaxBytes, "unlimited" for JetStream's 0 and -1.
func bytesLimit(n int64) string {
	if n <= 0 {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

// describe lists changes as "replicas 1 → 3, max age 168h0m0s → 24h0m0s".
func describe(diffs []streamDiff) string {
	parts := make([]string, len(diffs))
	for i, d := range diffs {
		parts[i] = fmt.Sprintf("%s %s → %s", d.setting, d.have, d.want)
	}
	return strings.Join(parts, ", ")
}

// settingAdvice says, per setting, what the operator can do when JetStream refuses it; the flags
// are cmd/scheduler's.
var settingAdvice = map[string]string{
	"replicas": "set --stream-replicas (AGATE_STREAM_REPLICAS) to at most the number of JetStream servers " +
		"in the cluster (1 on a server without a cluster)",
	"max bytes": "lower --stream-max-bytes (AGATE_STREAM_MAX_BYTES) to what the server's JetStream storage " +
		"(max_file_store) and the account's limits hold for four streams, or 0 for no cap",
	"max age": "set --stream-max-age (AGATE_STREAM_MAX_AGE) within the account's limits",
	"duplicate window": "set --stream-duplicate-window (AGATE_STREAM_DUPLICATE_WINDOW) within the account's " +
		"limits and at most --stream-max-age",
	"subjects": "another stream may already capture these subjects (nats stream ls): remove it or its subjects",
	"retention": "JetStream cannot change a work-queue stream's retention: once its consumers have caught up, " +
		"delete the stream (nats stream rm; its messages are lost) and start a scheduler node to create it again",
}

// advice is what the operator can do about the given settings, most likely cause first.
func advice(diffs []streamDiff) string {
	var out []string
	for _, setting := range []string{"replicas", "max bytes", "max age", "duplicate window", "subjects", "retention"} {
		if slices.ContainsFunc(diffs, func(d streamDiff) bool { return d.setting == setting }) {
			out = append(out, settingAdvice[setting])
		}
	}
	if len(out) == 0 {
		return "another stream may already capture the stream's subjects (nats stream ls), or the NATS user may " +
			"lack the permission (scheduler nats-config); the JetStream server's log says more"
	}
	return strings.Join(out, "; or ")
}
