package node_test

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/agatesched/agate/internal/api"
	"github.com/agatesched/agate/internal/command"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/query"
)

// discover sends a $SRV request and gathers the replies of this namespace's service, by node
// id, until it has one from each of nodes (asking again while a node is still starting).
func discover[T any](t *testing.T, e *env, subject string, nodes int) map[string]T {
	t.Helper()
	inbox := e.nc.NewRespInbox()
	sub, err := e.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	out := map[string]T{}
	deadline := time.Now().Add(15 * time.Second)
	for len(out) < nodes {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d nodes answered", subject, len(out), nodes)
		}
		if err := e.nc.PublishRequest(subject, inbox, nil); err != nil {
			t.Fatal(err)
		}
		for {
			m, err := sub.NextMsg(200 * time.Millisecond)
			if err != nil {
				break // no more answers to this round; ask again
			}
			var id micro.ServiceIdentity
			if json.Unmarshal(m.Data, &id) != nil || id.Name != events.ServiceName(e.ns) {
				continue // another test's service answering $SRV.PING
			}
			var v T
			if err := json.Unmarshal(m.Data, &v); err != nil {
				t.Fatalf("%s: %v: %s", subject, err, m.Data)
			}
			out[id.ID] = v
		}
	}
	return out
}

// TestAPIService: every command and query is an endpoint of the nodes' NATS service, which
// $SRV.PING, $SRV.INFO and $SRV.STATS discover; each request is answered by one node and
// counted, failures as errors.
func TestAPIService(t *testing.T) {
	e := newEnv(t)
	e.startNode("s1", nil)
	e.startNode("s2", nil)
	name := events.ServiceName(e.ns)

	pings := discover[micro.Ping](t, e, "$SRV.PING", 2)
	for _, p := range pings {
		if p.Version != api.Version || p.Metadata["namespace"] != e.ns || !slices.Contains([]string{"s1", "s2"}, p.Metadata["instance"]) {
			t.Errorf("ping %+v", p)
		}
	}

	want := map[string]string{}
	for _, c := range command.Names() {
		want[c] = "command"
	}
	for _, q := range query.Names() {
		want[q] = "query"
	}
	for id, info := range discover[micro.Info](t, e, "$SRV.INFO."+name, 2) {
		got := map[string]string{}
		for _, ep := range info.Endpoints {
			got[ep.Name] = ep.Metadata["kind"]
			if ep.Subject != events.Subjects(e.ns).API(ep.Name) || ep.QueueGroup != api.QueueGroup {
				t.Errorf("node %s: endpoint %+v", id, ep)
			}
		}
		if !maps.Equal(got, want) {
			t.Errorf("node %s serves %v; want %v", id, got, want)
		}
	}

	// Two queries that fail, three that succeed, one command; and a name nobody serves, which
	// is answered as an unknown command outside the service.
	for range 2 {
		if r := e.ask(t, "get_job", map[string]any{"job": map[string]any{"group": "g", "name": "missing"}}); r.OK {
			t.Fatal("get_job of a missing job succeeded")
		}
	}
	for range 3 {
		e.ask(t, "list_jobs", []byte(""))
	}
	if out := e.request("schedule_job", map[string]any{"id": "c1", "job": job("g", "j", "noop", nil, map[string]any{"durable": true})}); !out.OK {
		t.Fatalf("schedule_job: %+v", out.Error)
	}
	msg, err := e.nc.Request(events.Subjects(e.ns).API("launch_rocket"), []byte(`{"id":"r1"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var out command.Outcome
	if err := json.Unmarshal(msg.Data, &out); err != nil || out.OK || out.Error.Code != command.CodeInvalidArgument ||
		msg.Header.Get(micro.ErrorCodeHeader) != "400" {
		t.Errorf("launch_rocket answered %s (%v) with headers %v", msg.Data, err, msg.Header)
	}

	type count struct{ requests, errors int }
	wantCounts := map[string]count{"get_job": {2, 2}, "list_jobs": {3, 0}, "schedule_job": {1, 0}}
	// A node counts a request just after answering it, so the counts may lag the replies.
	var got map[string]count
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got = map[string]count{}
		for _, st := range discover[micro.Stats](t, e, "$SRV.STATS."+name, 2) {
			for _, ep := range st.Endpoints {
				c := got[ep.Name]
				got[ep.Name] = count{c.requests + ep.NumRequests, c.errors + ep.NumErrors}
			}
		}
		ok := len(got) == len(want)
		for ep, c := range got {
			ok = ok && c == wantCounts[ep]
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("$SRV.STATS counts %v; want %v and none elsewhere", got, wantCounts)
		}
	}
}
