package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"time"

	"github.com/agatesched/agate/internal/events"
)

type keyJSON struct {
	Group string `json:"group"`
	Name  string `json:"name"`
}

func (k keyJSON) String() string { return k.Group + "." + k.Name }

// parseLog turns event rows into the checker's input. The data members are read as the contract
// describes them, not through the scheduler's own types, as any consumer of the log would.
func parseLog(rows []logRow) (Log, error) {
	lg := Log{Scheduled: map[string]string{}}
	for _, r := range rows {
		var err error
		switch r.Type {
		case events.TypeJobFired:
			var d struct {
				FireID        string    `json:"fireId"`
				Job           keyJSON   `json:"job"`
				Trigger       keyJSON   `json:"trigger"`
				ScheduledTime time.Time `json:"scheduledTime"`
				Nonconcurrent bool      `json:"nonconcurrent"`
			}
			if err = json.Unmarshal(r.Data, &d); err == nil {
				lg.Fires = append(lg.Fires, Fire{Seq: r.Seq, FireID: d.FireID, Job: d.Job.String(), Trigger: d.Trigger.String(),
					ScheduledTime: d.ScheduledTime, Time: r.Time, Source: events.InstanceOf(r.Source), Nonconcurrent: d.Nonconcurrent})
			}
		case events.TypeJobCompleted, events.TypeJobFailed:
			var d struct {
				FireID        string    `json:"fireId"`
				Job           keyJSON   `json:"job"`
				Trigger       keyJSON   `json:"trigger"`
				ScheduledTime time.Time `json:"scheduledTime"`
				Worker        string    `json:"worker"`
				StartedTime   time.Time `json:"startedTime"`
				FinishedTime  time.Time `json:"finishedTime"`
				Attempt       int       `json:"attempt"`
				Error         *struct {
					Final bool `json:"final"`
				} `json:"error"`
			}
			if err = json.Unmarshal(r.Data, &d); err == nil {
				e := Execution{Seq: r.Seq, FireID: d.FireID, Job: d.Job.String(), Trigger: d.Trigger.String(), Worker: d.Worker,
					Started: d.StartedTime, Finished: d.FinishedTime, Attempt: d.Attempt, ScheduledAt: d.ScheduledTime,
					ReceivedTime: r.Time, Failed: r.Type == events.TypeJobFailed}
				if d.Error != nil {
					e.Final = d.Error.Final
				}
				lg.Executions = append(lg.Executions, e)
			}
		case events.TypeTriggerReleased:
			var d struct {
				Trigger keyJSON  `json:"trigger"`
				Reason  string   `json:"reason"`
				Nodes   []string `json:"nodes"`
			}
			if err = json.Unmarshal(r.Data, &d); err == nil {
				lg.Releases = append(lg.Releases, Release{Time: r.Time, Trigger: d.Trigger.String(), Reason: d.Reason, Nodes: d.Nodes})
			}
		case events.TypeTriggerScheduled:
			var d struct {
				Trigger   keyJSON `json:"trigger"`
				CommandID string  `json:"commandId"`
			}
			if err = json.Unmarshal(r.Data, &d); err == nil {
				lg.Scheduled[d.Trigger.String()] = d.CommandID
			}
		case events.TypeTriggerMisfired:
			var d struct {
				Trigger        keyJSON   `json:"trigger"`
				MissedFireTime time.Time `json:"missedFireTime"`
			}
			if err = json.Unmarshal(r.Data, &d); err == nil {
				lg.Misfires = append(lg.Misfires, fmt.Sprintf("%s missed %s (logged %s by %s)",
					d.Trigger, clock(d.MissedFireTime), clock(r.Time), events.InstanceOf(r.Source)))
			}
		case events.TypeTriggerError:
			var d struct {
				Trigger keyJSON `json:"trigger"`
				Reason  string  `json:"reason"`
			}
			if err = json.Unmarshal(r.Data, &d); err == nil {
				lg.Errors = append(lg.Errors, d.Trigger.String()+": "+d.Reason)
			}
		}
		if err != nil {
			return Log{}, fmt.Errorf("event %d (%s): %w", r.Seq, r.Type, err)
		}
	}
	return lg, nil
}

func commandOutput(ctx context.Context, bin string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}
