package fanout

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// benchmarkPage measures what a page of fan-out pays for its span, beside
// the page's write (a pipeline to Redis: BenchmarkPush in feed).
func benchmarkPage(b *testing.B, tp trace.TracerProvider) {
	w, err := New(nil, nil, nil, nil, Config{TracerProvider: tp})
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]int64, DefaultPageSize)
	write := func(ctx context.Context, followers []int64) error { // what push does around Feeds.Push
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.SetAttributes(attribute.Int("newsfeed.page.entries", len(followers)))
		}
		return nil
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_ = w.page(ctx, ids, write)
	}
}

// BenchmarkPageTracingOff: tracing off (no tracing.endpoint: no provider),
// the cost a page pays on every fan-out.
func BenchmarkPageTracingOff(b *testing.B) { benchmarkPage(b, nil) }

// BenchmarkPageNoopProvider: a no-op provider set (what the page would pay
// without the tracing-off path).
func BenchmarkPageNoopProvider(b *testing.B) { benchmarkPage(b, noop.NewTracerProvider()) }

// BenchmarkPageTracingOn: every page recorded (sample_ratio 1), exported
// nowhere.
func BenchmarkPageTracingOn(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	benchmarkPage(b, tp)
}
