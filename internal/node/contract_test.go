package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"path"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/schemas"
)

// eventSchemas maps an event type to the JSON Schema (schemas/json/event) that docs/contract.md
// publishes for it.
var eventSchemas = sync.OnceValues(func() (map[string]*jsonschema.Schema, error) {
	const base = "https://agate.dev/schemas/event/"
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	files, err := fs.Glob(schemas.JSON, "json/event/*.json")
	if err != nil {
		return nil, err
	}
	types := map[string]string{} // event type → schema URL
	for _, f := range files {
		raw, err := fs.ReadFile(schemas.JSON, f)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return nil, err
		}
		url := base + path.Base(f)
		if err := c.AddResource(url, doc); err != nil {
			return nil, err
		}
		var head struct {
			Properties struct {
				Type struct {
					Const string `json:"const"`
				} `json:"type"`
			} `json:"properties"`
		}
		_ = json.Unmarshal(raw, &head)
		if head.Properties.Type.Const != "" {
			types[head.Properties.Type.Const] = url
		}
	}
	out := map[string]*jsonschema.Schema{}
	for typ, url := range types {
		sch, err := c.Compile(url)
		if err != nil {
			return nil, err
		}
		out[typ] = sch
	}
	return out, nil
})

// checkContract validates every event the test wrote to the log, as its CloudEvents envelope,
// against the schema of its type: what Agate emits is what schemas/ promises.
func (e *env) checkContract() {
	t := e.t
	if t.Failed() {
		return
	}
	byType, err := eventSchemas()
	if err != nil {
		t.Fatalf("compiling event schemas: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := e.pool.Query(ctx, `select id, type, source, time, aggregate_id, data from events where sched_name = $1`, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var ev events.Event
		var data []byte
		if err := rows.Scan(&ev.ID, &ev.Type, &ev.Source, &ev.Time, &ev.Subject, &data); err != nil {
			t.Fatal(err)
		}
		ev.Data = data
		sch, ok := byType[ev.Type]
		if !ok {
			t.Errorf("event type %s has no schema in schemas/json/event", ev.Type)
			continue
		}
		body, err := json.Marshal(ev.Envelope())
		if err != nil {
			t.Fatal(err)
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(inst); err != nil {
			t.Errorf("%s event does not match its schema: %v\n%s", ev.Type, err, body)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}
