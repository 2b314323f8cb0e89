package proctest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Client speaks the gateway's HTTP API (README "HTTP API") with an API key.
// Safe for concurrent use.
type Client struct {
	HTTP       *http.Client
	APIKey     string
	AdminToken string
}

// NewClient returns a client with a 15 s per-request timeout (longer than
// the gateway's 5 s forward timeout).
func NewClient(apiKey, adminToken string) *Client {
	return &Client{
		HTTP:       &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		APIKey:     apiKey,
		AdminToken: adminToken,
	}
}

// Event is an event POST body: {"type":"message","data":{"text":Text},
// "idempotency_key":Key}.
type Event struct {
	Text string
	Key  string
}

func (e Event) body() []byte {
	b, _ := json.Marshal(map[string]any{
		"type": "message", "data": map[string]string{"text": e.Text}, "idempotency_key": e.Key,
	})
	return b
}

// Retry is a retry directive: {"after_ms":N,"budget_ms":M}.
type Retry struct {
	AfterMS  int64 `json:"after_ms"`
	BudgetMS int64 `json:"budget_ms"`
}

// Accepted is the 202 body: {"session","epoch","seq","duplicate"}.
type Accepted struct {
	Session   string `json:"session"`
	Epoch     int64  `json:"epoch"`
	Seq       int64  `json:"seq"`
	Duplicate bool   `json:"duplicate"`
}

// Reply is one HTTP answer of the event API. For a 202 Accepted is set;
// otherwise Code, Message and (for a retry directive) Retry and RetryAfter
// (the header) come from the error body.
type Reply struct {
	Status     int
	Accepted   *Accepted
	Code       string
	Message    string
	Retry      *Retry
	RetryAfter string
	Body       []byte
}

func (r Reply) String() string {
	return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(r.Body))
}

// PostEvent sends one POST /api/sessions/{id}/events to the node at baseURL.
// An error means no HTTP answer came (connection refused or reset,
// timeout): the event may or may not have reached the node.
func (c *Client) PostEvent(ctx context.Context, baseURL, id string, ev Event) (Reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/api/sessions/"+id+"/events", bytes.NewReader(ev.body()))
	if err != nil {
		return Reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.APIKey)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return Reply{}, fmt.Errorf("proctest: post %s: %w", id, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Reply{}, fmt.Errorf("proctest: post %s: read body: %w", id, err)
	}
	r := Reply{Status: resp.StatusCode, Body: b, RetryAfter: resp.Header.Get("Retry-After")}
	if resp.StatusCode == http.StatusAccepted {
		var acc Accepted
		if err := json.Unmarshal(b, &acc); err != nil {
			return r, fmt.Errorf("proctest: post %s: 202 body %q: %w", id, b, err)
		}
		r.Accepted = &acc
		return r, nil
	}
	var eb struct {
		Error   string `json:"error"`
		Message string `json:"message"`
		Retry   *Retry `json:"retry"`
	}
	if err := json.Unmarshal(b, &eb); err != nil {
		return r, fmt.Errorf("proctest: post %s: %d body %q: %w", id, resp.StatusCode, b, err)
	}
	r.Code, r.Message, r.Retry = eb.Error, eb.Message, eb.Retry
	return r, nil
}

// Message is one history entry.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// SessionView is the GET /api/sessions/{id} body: the newest page of
// history (README "History").
type SessionView struct {
	Session    string    `json:"session"`
	Epoch      int64     `json:"epoch"`
	Seq        int64     `json:"seq"`
	History    []Message `json:"history"`
	Total      int64     `json:"total"`       // messages in the whole history
	NextBefore int64     `json:"next_before"` // ?before= of the next older page; 0 at the first message
	Pending    []Message `json:"pending"`     // accepted events whose turn has not completed, oldest first
	Running    bool      `json:"running"`     // the first pending event's turn is running
	Node       string    `json:"node"`
	Owner      string    `json:"owner"`
}

// GetSession reads GET /api/sessions/{id} from the node at baseURL.
func (c *Client) GetSession(ctx context.Context, baseURL, id string) (SessionView, error) {
	var v SessionView
	err := c.getJSON(ctx, baseURL+"/api/sessions/"+id, "Bearer "+c.APIKey, &v)
	return v, err
}

// HistoryMessage is one stored history message:
// {"n","turn":{"epoch","seq"},"role","content"}. N numbers it in the whole
// history from 1; Turn is the position of the user_event whose turn wrote
// it.
type HistoryMessage struct {
	N    int64 `json:"n"`
	Turn struct {
		Epoch int64 `json:"epoch"`
		Seq   int64 `json:"seq"`
	} `json:"turn"`
	Message
}

// GetHistory reads session id's whole history from the node at baseURL,
// oldest first, paging GET /api/sessions/{id}?before=&limit=1000 from the
// newest page back. It fails when the pages do not add up to the total (the
// history changed while it was read).
func (c *Client) GetHistory(ctx context.Context, baseURL, id string) ([]HistoryMessage, error) {
	var all []HistoryMessage
	var total int64
	for before := int64(0); ; {
		url := baseURL + "/api/sessions/" + id + "?limit=1000"
		if before > 0 {
			url += "&before=" + strconv.FormatInt(before, 10)
		}
		var page struct {
			History    []HistoryMessage `json:"history"`
			Total      int64            `json:"total"`
			NextBefore int64            `json:"next_before"`
		}
		if err := c.getJSON(ctx, url, "Bearer "+c.APIKey, &page); err != nil {
			return nil, err
		}
		if before == 0 {
			total = page.Total
		}
		all = append(page.History, all...)
		if page.NextBefore == 0 {
			break
		}
		before = page.NextBefore
	}
	if int64(len(all)) != total {
		return nil, fmt.Errorf("proctest: history of %s: pages hold %d messages, total %d", id, len(all), total)
	}
	return all, nil
}

// NodeInfo is the GET /admin/node body.
type NodeInfo struct {
	Name     string `json:"name"`
	Owner    string `json:"owner"`
	Mode     string `json:"mode"`
	Ready    bool   `json:"ready"`
	Draining bool   `json:"draining"`
	Sockets  int64  `json:"sockets"`
	Sessions int    `json:"sessions"`
}

// AdminNode reads GET /admin/node.
func (c *Client) AdminNode(ctx context.Context, baseURL string) (NodeInfo, error) {
	var v NodeInfo
	err := c.getJSON(ctx, baseURL+"/admin/node", "Bearer "+c.AdminToken, &v)
	return v, err
}

// AdminDrain sends POST /admin/drain and returns the status code.
func (c *Client) AdminDrain(ctx context.Context, baseURL string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/admin/drain", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.AdminToken)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, fmt.Errorf("proctest: admin drain: %w", err)
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Status sends GET path to baseURL without credentials and returns the
// status code (readiness, liveness).
func (c *Client) Status(ctx context.Context, baseURL, path string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, fmt.Errorf("proctest: get %s: %w", path, err)
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func (c *Client) getJSON(ctx context.Context, url, auth string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", auth)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("proctest: get %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("proctest: get %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("proctest: get %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("proctest: get %s: %w", url, err)
	}
	return nil
}

// Attempt is one try of Deliver.
type Attempt struct {
	Node  string        // base URL tried
	Reply Reply         // the answer (zero when Err is set)
	Err   error         // no HTTP answer
	At    time.Duration // since Deliver began
}

// Outcome is how Deliver ended.
type Outcome struct {
	Accepted   *Accepted // set when an attempt was accepted
	Attempts   []Attempt
	Directives int // retry directives followed
	// Unknowns counts 504 answers whose outcome is unknown
	// (outcome_unknown, forward_timeout), each re-sent with the same key.
	Unknowns int
	Elapsed  time.Duration // first send to final answer
	// Err is set when delivery failed: an error answer without a retry
	// directive (Reply holds it), a directive's budget spent, or ctx ended.
	Err error
	// Reply is the final answer.
	Reply Reply
}

// ErrBudgetSpent means retry directives kept coming until their budget
// ran out.
var ErrBudgetSpent = errors.New("proctest: retry budget spent")

// ErrNoDirective means an error answer came without a retry directive.
var ErrNoDirective = errors.New("proctest: error answer without a retry directive")

// Deliver posts ev to session id the way a well-behaved client does
// (README "Retry directive"): a 202 ends it; a 503 with a retry directive
// is re-sent (same idempotency key) after after_ms, for as long as the
// latest directive's budget_ms allows; an attempt with no HTTP answer at
// all (node down or restarting) is re-sent at once to the next node, at
// most noAnswerLimit times in a row; any other answer fails the delivery
// with ErrNoDirective. pick(i) chooses the node (base URL) for attempt i.
func (c *Client) Deliver(ctx context.Context, pick func(i int) string, id string, ev Event) Outcome {
	const noAnswerLimit = 50
	start := time.Now()
	var out Outcome
	var deadline time.Time
	noAnswer := 0
	for i := 0; ; i++ {
		node := pick(i)
		r, err := c.PostEvent(ctx, node, id, ev)
		out.Attempts = append(out.Attempts, Attempt{Node: node, Reply: r, Err: err, At: time.Since(start)})
		out.Reply = r
		var wait time.Duration
		switch {
		case ctx.Err() != nil:
			out.Err = ctx.Err()
		case err != nil:
			noAnswer++
			if noAnswer > noAnswerLimit {
				out.Err = fmt.Errorf("proctest: no answer %d times: %w", noAnswer, err)
			}
			wait = 20 * time.Millisecond
		case r.Accepted != nil:
			out.Accepted = r.Accepted
		case r.Status == http.StatusGatewayTimeout && (r.Code == "outcome_unknown" || r.Code == "forward_timeout"):
			out.Unknowns++
			if out.Unknowns > noAnswerLimit {
				out.Err = fmt.Errorf("proctest: outcome unknown %d times: %v", out.Unknowns, r)
			}
			wait = 20 * time.Millisecond
		case r.Status == http.StatusServiceUnavailable && r.Retry != nil:
			noAnswer = 0
			out.Directives++
			now := time.Now()
			deadline = now.Add(time.Duration(r.Retry.BudgetMS) * time.Millisecond)
			wait = time.Duration(r.Retry.AfterMS) * time.Millisecond
			if now.Add(wait).After(deadline) {
				out.Err = fmt.Errorf("%w after %d directives: %v", ErrBudgetSpent, out.Directives, r)
			}
		default:
			out.Err = fmt.Errorf("%w: %v", ErrNoDirective, r)
		}
		if out.Accepted != nil || out.Err != nil {
			out.Elapsed = time.Since(start)
			return out
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}
