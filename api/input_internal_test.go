package api

import (
	"testing"
	"time"
)

func TestHasLoneSurrogate(t *testing.T) {
	t.Parallel()
	cases := map[string]bool{
		`{"body": "plain"}`:                  false,
		`{"body": "\u00e9 \u4e2d"}`:          false,
		`{"body": "\ud83d\ude00"}`:           false, // a pair: 😀
		`{"body": "\\ud800"}`:                false, // an escaped backslash, then text
		`{"body": "\ud800"}`:                 true,
		`{"body": "\udc00"}`:                 true,
		`{"body": "\ud800\u0041"}`:           true,
		`{"body": "\ud800x"}`:                true,
		`{"body": "ok \ud83d\ude00 \udfff"}`: true,
		`{"body": "\\\ud800"}`:               true,
		`{"body": "\uZZZZ"}`:                 false, // not JSON anyway: the decoder says so
	}
	for in, want := range cases {
		if got := hasLoneSurrogate([]byte(in)); got != want {
			t.Errorf("hasLoneSurrogate(%s) = %v, want %v", in, got, want)
		}
	}
}

func TestCursorsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, id := range []int64{1, 71, 1<<53 - 1} {
		got, err := decodePostCursor(*encodePostCursor(id))
		if err != nil || got != id {
			t.Errorf("post cursor %d round-tripped to %d, %v", id, got, err)
		}
	}
	for _, bad := range []string{"!!!", "abc", "cDA", "cC0x", "ZjE6Mg"} {
		if _, err := decodePostCursor(bad); err == nil {
			t.Errorf("decodePostCursor(%q) accepted", bad)
		}
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int{
		time.Millisecond:       1,
		time.Second:            1,
		time.Second + 1:        2,
		20 * time.Second:       20,
		59*time.Second + 999e6: 60,
	} {
		if got := retryAfterSeconds(d); got != want {
			t.Errorf("retryAfterSeconds(%s) = %d, want %d", d, got, want)
		}
	}
}
