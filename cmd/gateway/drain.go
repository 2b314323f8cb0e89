package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// drainCmd starts a node's drain through its admin API (POST /admin/drain)
// and, with --wait, polls GET /admin/node until the node holds no session
// and no socket. It is the Kubernetes preStop hook (deploy/k8s): the image
// has no shell or curl, and the admin token comes from the container's
// ADMIN_TOKEN.
type drainCmd struct {
	URL        string        `name:"url" default:"http://127.0.0.1:4000" help:"The node's base URL."`
	AdminToken string        `name:"admin-token" env:"ADMIN_TOKEN" required:"" help:"The node's admin token."`
	Wait       bool          `name:"wait" help:"Wait until the node has no session and no socket left."`
	Timeout    time.Duration `name:"timeout" default:"60s" help:"Give up after this long (exit status 1)."`
}

// Run posts the drain and, with --wait, waits for it; progress goes to out.
func (d *drainCmd) Run(out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), d.Timeout)
	defer cancel()
	base := strings.TrimSuffix(d.URL, "/")
	if _, err := d.call(ctx, http.MethodPost, base+"/admin/drain", http.StatusAccepted); err != nil {
		return err
	}
	fmt.Fprintln(out, "drain started")
	if !d.Wait {
		return nil
	}
	for {
		body, err := d.call(ctx, http.MethodGet, base+"/admin/node", http.StatusOK)
		if err != nil {
			return err
		}
		var info struct {
			Sockets  int64 `json:"sockets"`
			Sessions int   `json:"sessions"`
		}
		if err := json.Unmarshal(body, &info); err != nil {
			return fmt.Errorf("drain: /admin/node: %w", err)
		}
		if info.Sockets == 0 && info.Sessions == 0 {
			fmt.Fprintln(out, "drained: no session, no socket")
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drain: %d sessions and %d sockets left after %v", info.Sessions, info.Sockets, d.Timeout)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (d *drainCmd) call(ctx context.Context, method, url string, want int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, fmt.Errorf("drain: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+d.AdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("drain: no answer from %s within %v", url, d.Timeout)
		}
		return nil, fmt.Errorf("drain: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("drain: %s: %w", url, err)
	}
	if resp.StatusCode != want {
		return nil, fmt.Errorf("drain: %s %s answered %d: %s", method, url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return body, nil
}
