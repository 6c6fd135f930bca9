package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/newsfeed/newsfeed/api"
	"github.com/newsfeed/newsfeed/internal/openapitest"
	"github.com/newsfeed/newsfeed/internal/probe"
	"github.com/newsfeed/newsfeed/internal/testenv"
)

const traceTestSecret = "trace-test-secret-trace-test-secret"

// roleUnderTest is one role running in this process, on the test's
// database and Redis keys.
type roleUnderTest struct {
	sys      *System
	httpAddr string
}

// startRole runs role in this process with the environment env (the
// test's database, Redis prefix, …) and, if tp is set, that tracer
// provider; it stops when the test ends.
func startRole(t *testing.T, role Role, env map[string]string, tp trace.TracerProvider) roleUnderTest {
	t.Helper()
	httpAddr, err := probe.FreeAddr()
	require.NoError(t, err)
	environ := []string{"NEWSFEED_HTTP_ADDR=" + httpAddr, "NEWSFEED_METRICS_ADDR=", "NEWSFEED_SHUTDOWN_DRAIN=0s",
		"NEWSFEED_AUTH_SECRET=" + traceTestSecret, "NEWSFEED_OUTBOX_POLL_INTERVAL=50ms", "NEWSFEED_LOG_LEVEL=error"}
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	cfg, err := LoadConfig(ConfigSources{Environ: environ})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	sys, err := Open(ctx, cfg, zap.NewNop(), role)
	require.NoError(t, err)
	if tp != nil {
		sys.tracerProvider = tp
	}
	done := make(chan error, 1)
	go func() { done <- sys.Run(ctx, []Role{role}, []byte(traceTestSecret)) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		sys.Close()
	})
	if role == RoleServe {
		require.NoError(t, probe.WaitHealthy(ctx, "http://"+httpAddr))
	}
	return roleUnderTest{sys: sys, httpAddr: httpAddr}
}

// call makes one API request as user and returns the status and body. The
// answer is checked against docs/openapi.yaml, as every API test's is.
func (r roleUnderTest) call(t *testing.T, user int64, method, path, body string) (int, []byte) {
	t.Helper()
	token, err := api.IssueToken([]byte(traceTestSecret), user, time.Hour)
	require.NoError(t, err)
	req, err := http.NewRequest(method, "http://"+r.httpAddr+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	spec, err := openapitest.Load()
	require.NoError(t, err)
	require.NoError(t, spec.Check(openapitest.Exchange{
		Request: req, RequestBody: []byte(body), Status: resp.StatusCode, Header: resp.Header, Body: out,
	}))
	return resp.StatusCode, out
}

// providerOf is a tracer provider of its own for one role, recording into rec.
func providerOf(t *testing.T, role Role, rec *tracetest.SpanRecorder) *sdktrace.TracerProvider {
	t.Helper()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(serviceName([]Role{role})))))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// TestOnePostOneTrace: serve, dispatch and work run as three processes
// would (three Systems, each with its own tracer provider; one recorder
// sees what all three export), and a post to two followers, split into
// chunks of one (three: the last, above the last follower, is empty), is
// one trace: the request, its create transaction, the publish
// (child of the context the outbox row kept, linked to the dispatcher's
// claim), the fan-out that splits, each chunk's publish and fan-out, and
// their pages.
func TestOnePostOneTrace(t *testing.T) {
	_, prefix := testenv.NewRedis(t)
	env := map[string]string{
		"NEWSFEED_DATABASE_URL":      testenv.NewDatabaseURL(t),
		"NEWSFEED_REDIS_URL":         testenv.RedisURL(),
		"NEWSFEED_REDIS_PREFIX":      prefix,
		"NEWSFEED_FANOUT_CHUNK_SIZE": "1",
	}
	rec := tracetest.NewSpanRecorder()
	serve := startRole(t, RoleServe, env, providerOf(t, RoleServe, rec))
	startRole(t, RoleDispatch, env, providerOf(t, RoleDispatch, rec))
	startRole(t, RoleWork, env, providerOf(t, RoleWork, rec))

	const john, alan, bea = 1, 2, 3
	for _, follower := range []int64{alan, bea} {
		status, body := serve.call(t, follower, "PUT", "/v1/following/1", "")
		require.Equal(t, http.StatusNoContent, status, "%s", body)
		status, body = serve.call(t, follower, "GET", "/v1/feed", "") // a feed that is read is fanned out to
		require.Equal(t, http.StatusOK, status, "%s", body)
	}
	// The follows' events are applied first: one applied after the post
	// would merge it into the feed ahead of its fan-out.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.Len(c, named(rec.Ended(), "fanout follow.created"), 2)
	}, 30*time.Second, 10*time.Millisecond, "the follows are applied")
	status, body := serve.call(t, john, "POST", "/v1/posts", `{"body":"traced"}`)
	require.Equal(t, http.StatusCreated, status, "%s", body)
	var post struct{ ID int64 }
	require.NoError(t, json.Unmarshal(body, &post))
	// The request's trace, once both chunks' fan-outs ended.
	var request sdktrace.ReadOnlySpan
	var spans []sdktrace.ReadOnlySpan
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		request, spans = nil, nil
		for _, s := range rec.Ended() {
			if s.Name() == "POST /v1/posts" {
				request = s
			}
		}
		require.NotNil(c, request)
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID() == request.SpanContext().TraceID() {
				spans = append(spans, s)
			}
		}
		require.Len(c, named(spans, "fanout fanout.chunk"), 3)
	}, 30*time.Second, 10*time.Millisecond, "the chunks' fan-outs are traced")

	only := func(name string) sdktrace.ReadOnlySpan {
		t.Helper()
		found := named(spans, name)
		require.Len(t, found, 1, "spans named %q", name)
		return found[0]
	}
	requireChild := func(child, parent sdktrace.ReadOnlySpan) {
		t.Helper()
		require.Equal(t, parent.SpanContext().SpanID(), child.Parent().SpanID(), "%s is a child of %s", child.Name(), parent.Name())
	}

	require.False(t, request.Parent().IsValid(), "the request starts the trace")
	requireService(t, request, "newsfeed-serve")
	require.Equal(t, trace.SpanKindServer, request.SpanKind())
	requireAttr(t, request, "http.route", "/v1/posts")
	requireAttr(t, request, "http.response.status_code", int64(http.StatusCreated))

	create := only("create post")
	requireChild(create, request)
	requireAttr(t, create, "newsfeed.post_id", post.ID)

	publish := only("publish post.created")
	requireService(t, publish, "newsfeed-dispatch")
	requireChild(publish, create)
	require.True(t, publish.Parent().IsRemote(), "from the context the outbox row kept")
	require.Len(t, publish.Links(), 1, "linked to the claim that took the row")
	claim := findSpan(t, rec.Ended(), publish.Links()[0].SpanContext)
	require.Equal(t, "claim outbox", claim.Name())
	requireService(t, claim, "newsfeed-dispatch")
	require.NotEqual(t, request.SpanContext().TraceID(), claim.SpanContext().TraceID(), "a claim serves many posts: a trace of its own")

	split := only("fanout post.created")
	requireService(t, split, "newsfeed-work")
	requireChild(split, publish)
	requireAttr(t, split, "newsfeed.fanout.outcome", "split")

	chunkPublishes := named(spans, "publish fanout.chunk")
	require.Len(t, chunkPublishes, 3)
	pagesWritten := 0
	for _, p := range chunkPublishes {
		requireChild(p, split) // the chunks keep the splitting fan-out's context
		var fanout sdktrace.ReadOnlySpan
		for _, f := range named(spans, "fanout fanout.chunk") {
			if f.Parent().SpanID() == p.SpanContext().SpanID() {
				fanout = f
			}
		}
		require.NotNil(t, fanout, "the chunk's fan-out is the child of its publish")
		requireAttr(t, fanout, "newsfeed.fanout.outcome", "done")
		var pages []sdktrace.ReadOnlySpan
		for _, pg := range named(spans, "follower page") {
			if pg.Parent().SpanID() == fanout.SpanContext().SpanID() {
				pages = append(pages, pg)
			}
		}
		require.LessOrEqual(t, len(pages), 1, "one span per page of followers")
		for _, pg := range pages {
			requireAttr(t, pg, "newsfeed.page.followers", int64(1))
			// How many feeds gained the post: 1, or 0 when the follower's
			// feed had left Redis meanwhile (the next read rebuilds it).
			requireAttrIn(t, pg, "newsfeed.page.entries", int64(0), int64(1))
			pagesWritten++
		}
	}
	require.Equal(t, 2, pagesWritten, "a page for each follower's chunk, none for the empty one")
	for _, follower := range []int64{alan, bea} {
		_, body := serve.call(t, follower, "GET", "/v1/feed", "")
		require.Contains(t, string(body), `"id":`+strconv.FormatInt(post.ID, 10), "user %d's feed has the post", follower)
	}
}

func named(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func findSpan(t *testing.T, spans []sdktrace.ReadOnlySpan, sc trace.SpanContext) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range spans {
		if s.SpanContext().SpanID() == sc.SpanID() && s.SpanContext().TraceID() == sc.TraceID() {
			return s
		}
	}
	t.Fatalf("no span %s", sc.SpanID())
	return nil
}

func requireService(t *testing.T, s sdktrace.ReadOnlySpan, want string) {
	t.Helper()
	got, _ := s.Resource().Set().Value(semconv.ServiceNameKey)
	require.Equal(t, want, got.AsString(), "the service of %s", s.Name())
}

func requireAttrIn(t *testing.T, s sdktrace.ReadOnlySpan, key string, want ...any) {
	t.Helper()
	for _, kv := range s.Attributes() {
		if kv.Key == attribute.Key(key) {
			require.Contains(t, want, kv.Value.AsInterface(), "%s of %s", key, s.Name())
			return
		}
	}
	t.Fatalf("%s has no attribute %s: %v", s.Name(), key, s.Attributes())
}

func requireAttr(t *testing.T, s sdktrace.ReadOnlySpan, key string, want any) {
	t.Helper()
	requireAttrIn(t, s, key, want)
}

// TestTracesReachTheCollector: with tracing.endpoint set, a process sends
// its spans over OTLP/HTTP to <endpoint>/v1/traces, under its role's
// service name, and flushes them when it stops.
func TestTracesReachTheCollector(t *testing.T) {
	var mu sync.Mutex
	var got []*collectortrace.ExportTraceServiceRequest
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(r.Body)
		msg := &collectortrace.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || err != nil || proto.Unmarshal(raw, msg) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, msg)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(nil)
	}))
	t.Cleanup(collector.Close)

	_, prefix := testenv.NewRedis(t)
	env := map[string]string{
		"NEWSFEED_DATABASE_URL":     testenv.NewDatabaseURL(t),
		"NEWSFEED_REDIS_URL":        testenv.RedisURL(),
		"NEWSFEED_REDIS_PREFIX":     prefix,
		"NEWSFEED_TRACING_ENDPOINT": collector.URL,
	}
	t.Run("serve", func(t *testing.T) {
		serve := startRole(t, RoleServe, env, nil)
		status, _ := serve.call(t, 1, "GET", "/v1/feed", "")
		require.Equal(t, http.StatusOK, status)
	}) // stopped: its spans are flushed

	mu.Lock()
	defer mu.Unlock()
	var names []string
	for _, msg := range got {
		for _, rs := range msg.GetResourceSpans() {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == string(semconv.ServiceNameKey) {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					names = append(names, service+" "+s.GetName())
				}
			}
		}
	}
	require.Contains(t, names, "newsfeed-serve GET /v1/feed")
}

func TestTraceEndpoint(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://collector:4318":           "http://collector:4318/v1/traces",
		"http://collector:4318/":          "http://collector:4318/v1/traces",
		"https://otlp.example/api/traces": "https://otlp.example/api/traces",
	} {
		got, err := traceEndpoint(in)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	for _, bad := range []string{"collector:4318", "grpc://collector:4317", "http://", "://x"} {
		_, err := traceEndpoint(bad)
		require.Error(t, err, "%q", bad)
	}
}
