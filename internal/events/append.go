package events

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/store"
)

//go:embed queries.sql
var queriesSQL string

var queries = store.ParseQueries(queriesSQL)

// Append writes evs to the event log in tx, in one statement. The relay publishes those with a
// Topic after commit.
func Append(ctx context.Context, tx pgx.Tx, namespace string, evs []Event) error {
	if len(evs) == 0 {
		return nil
	}
	n := len(evs)
	ids := make([]uuid.UUID, n)
	types, sources, aggs, aggIDs, topics, datas, traces := make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	times := make([]time.Time, n)
	for i, e := range evs {
		ids[i], types[i], sources[i], aggs[i], aggIDs[i] = e.ID, e.Type, e.Source, e.Aggregate, e.AggregateID
		topics[i], times[i], datas[i], traces[i] = e.Topic, e.Time, string(e.Data), e.TraceParent
	}
	_, err := tx.Exec(ctx, queries.Get("Append"), namespace, ids, types, sources, aggs, aggIDs, topics, times, datas, traces)
	if err != nil {
		return fmt.Errorf("appending %d events to the log: %w", n, err)
	}
	return nil
}
