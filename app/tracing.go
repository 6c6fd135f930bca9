package app

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.uber.org/zap"
)

// Tracing: off unless tracing.endpoint names a collector. The exporter is
// OTLP over HTTP (protobuf, port 4318): every collector (the OpenTelemetry
// Collector, Jaeger, Tempo, vendors' agents) takes it, it goes through any
// HTTP proxy or load balancer, and it is debugged with curl. (OTLP/gRPC
// would need an HTTP/2 path end to end for no gain at this volume.) The
// exporter also reads the standard OTEL_EXPORTER_OTLP_HEADERS (a vendor's
// API key, say) and OTEL_EXPORTER_OTLP_TIMEOUT; OTEL_RESOURCE_ATTRIBUTES
// adds to the resource (deployment.environment.name=prod, say).
//
// Spans are batched and sent in the background; a collector that is down
// or slow costs dropped spans, never a request (the batcher's queue is
// bounded and never blocks).

// tracesPath is where a collector takes OTLP/HTTP traces.
const tracesPath = "/v1/traces"

// traceEndpoint returns the URL traces are sent to: endpoint, with
// /v1/traces when it has no path.
func traceEndpoint(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not an http:// or https:// URL of a collector (http://collector:4318)", endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = tracesPath
	}
	return u.String(), nil
}

// serviceName is the service.name of a process's spans: one per role, so
// that a post's trace shows which process did what.
func serviceName(roles []Role) string {
	if len(roles) == 1 {
		return "newsfeed-" + string(roles[0])
	}
	return "newsfeed"
}

// newTracerProvider returns the SDK's tracer provider exporting to
// tracing.endpoint, sampling new traces at tracing.sample_ratio and
// following the decision of a trace started elsewhere; nil when tracing is
// off. Shut it down to flush what it holds.
func newTracerProvider(ctx context.Context, cfg *Config, log *zap.Logger, roles []Role) (*sdktrace.TracerProvider, error) {
	if cfg.Tracing.Endpoint == "" {
		return nil, nil
	}
	endpoint, err := traceEndpoint(cfg.Tracing.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("tracing.endpoint: %w", err)
	}
	exporter, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("tracing.endpoint: %w", err)
	}
	build := ReadBuildInfo()
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost(),
		resource.WithAttributes(semconv.ServiceName(serviceName(roles)), semconv.ServiceVersion(build.Version)))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	otel.SetErrorHandler(exportErrors(log.Named("tracing")))
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.Tracing.SampleRatio))),
	), nil
}

// exportErrorEvery bounds the lines a failing exporter logs: one for the
// first failure, then at most one per this long, with how many were not.
const exportErrorEvery = time.Minute

// exportErrors logs the SDK's errors (a collector that does not answer)
// without repeating the same outage every few seconds.
func exportErrors(log *zap.Logger) otel.ErrorHandlerFunc {
	var mu sync.Mutex
	var last time.Time
	var quiet int
	return func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if !last.IsZero() && time.Since(last) < exportErrorEvery {
			quiet++
			return
		}
		log.Warn("cannot export traces; spans are dropped until the collector answers",
			zap.String("key", "tracing.endpoint"), zap.Error(err), zap.Int("errors_not_logged", quiet))
		last, quiet = time.Now(), 0
	}
}
