package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
)

// CreateSchedule posts a schedule (POST /v1/schedules).
func (c *Client) CreateSchedule(ctx context.Context, req ScheduleRequest) (Schedule, error) {
	return c.scheduleCall(ctx, http.MethodPost, "/v1/schedules", &req)
}

// UpdateSchedule changes the fields req gives of schedule name (PATCH).
func (c *Client) UpdateSchedule(ctx context.Context, name string, req ScheduleRequest) (Schedule, error) {
	return c.scheduleCall(ctx, http.MethodPatch, "/v1/schedules/"+url.PathEscape(name), &req)
}

// Schedules lists the schedules.
func (c *Client) Schedules(ctx context.Context) (ScheduleList, error) {
	var out ScheduleList
	_, err := c.do(ctx, http.MethodGet, "/v1/schedules", nil, &out)
	return out, err
}

// Schedule returns one schedule.
func (c *Client) Schedule(ctx context.Context, name string) (Schedule, error) {
	return c.scheduleCall(ctx, http.MethodGet, "/v1/schedules/"+url.PathEscape(name), nil)
}

// PauseSchedule pauses schedule name.
func (c *Client) PauseSchedule(ctx context.Context, name string) (Schedule, error) {
	return c.scheduleCall(ctx, http.MethodPost, "/v1/schedules/"+url.PathEscape(name)+"/pause", nil)
}

// ResumeSchedule resumes schedule name.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (Schedule, error) {
	return c.scheduleCall(ctx, http.MethodPost, "/v1/schedules/"+url.PathEscape(name)+"/resume", nil)
}

// DeleteSchedule deletes schedule name.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/schedules/"+url.PathEscape(name), nil, nil)
	return err
}

func (c *Client) scheduleCall(ctx context.Context, method, path string, req *ScheduleRequest) (Schedule, error) {
	var out Schedule
	var body []byte
	if req != nil {
		var err error
		if body, err = json.Marshal(req); err != nil {
			return out, err
		}
	}
	_, err := c.do(ctx, method, path, body, &out)
	return out, err
}
