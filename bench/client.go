package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/newsfeed/newsfeed/api"
)

func (r *runner) token(user int64) string {
	if t, ok := r.tokens.Load(user); ok {
		return t.(string)
	}
	t, _ := api.IssueToken(r.h.Secret, user, 24*time.Hour)
	r.tokens.Store(user, t)
	return t
}

// post creates a post through the API.
func (r *runner) post(ctx context.Context, author int64) error {
	req, err := http.NewRequestWithContext(ctx, "POST", r.h.APIURL+"/v1/posts",
		strings.NewReader(`{"body":"bench post"}`))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+r.token(author))
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("POST /v1/posts: %s", resp.Status)
	}
	return nil
}

// repost reposts original on behalf of user through the API.
func (r *runner) repost(ctx context.Context, user, original int64) error {
	req, err := http.NewRequestWithContext(ctx, "POST", r.h.APIURL+"/v1/posts/"+strconv.FormatInt(original, 10)+"/reposts", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+r.token(user))
	resp, err := r.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("POST /v1/posts/%d/reposts: %s", original, resp.Status)
	}
	return nil
}

// readFeed reads a first feed page through the API.
func (r *runner) readFeed(ctx context.Context, user int64) error {
	req, err := http.NewRequestWithContext(ctx, "GET", r.h.APIURL+"/v1/feed?limit=20", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+r.token(user))
	resp, err := r.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var page struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || len(page.Items) == 0 {
		return fmt.Errorf("GET /v1/feed: %s with %d items", resp.Status, len(page.Items))
	}
	return nil
}

// readFeedPage reads a feed page of 20 through the API, from cursor (""
// for the first), and returns its posts' ids and the next page's cursor
// ("" after the last).
func (r *runner) readFeedPage(ctx context.Context, user int64, cursor string) ([]int64, string, error) {
	u := r.h.APIURL + "/v1/feed?limit=20"
	if cursor != "" {
		u += "&cursor=" + url.QueryEscape(cursor)
	}
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Authorization", "Bearer "+r.token(user))
	resp, err := r.http.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	var page struct {
		Items []struct {
			ID int64 `json:"id"`
		} `json:"items"`
		NextCursor *string `json:"next_cursor"`
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, "", fmt.Errorf("GET /v1/feed: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return nil, "", fmt.Errorf("GET /v1/feed: %w", err)
	}
	ids := make([]int64, len(page.Items))
	for i, it := range page.Items {
		ids[i] = it.ID
	}
	next := ""
	if page.NextCursor != nil {
		next = *page.NextCursor
	}
	return ids, next, nil
}
