// Package telemetry builds a gateway process's OpenTelemetry tracer
// provider from the standard OTEL_* environment variables. Tracing is off
// unless they ask for it: the provider is then a no-op one, whose spans
// record nothing and cost a few nanoseconds each.
//
// Variables read (README "Tracing"):
//
//	OTEL_SDK_DISABLED=true               tracing off, whatever else is set
//	OTEL_TRACES_EXPORTER                 "otlp" or "none"; unset: "otlp" when an
//	                                     OTLP endpoint is set, else "none"
//	OTEL_EXPORTER_OTLP_ENDPOINT          collector base URL (…/v1/traces is added)
//	OTEL_EXPORTER_OTLP_TRACES_ENDPOINT   full traces URL (wins over the above)
//	OTEL_EXPORTER_OTLP_PROTOCOL          "http/protobuf" (the only protocol built in)
//	OTEL_EXPORTER_OTLP_TRACES_PROTOCOL   likewise, for traces only
//	OTEL_EXPORTER_OTLP_HEADERS, …_TIMEOUT, …_COMPRESSION, …_CERTIFICATE   as the OTLP spec says
//	OTEL_SERVICE_NAME                    service.name (default "relay-gateway")
//	OTEL_RESOURCE_ATTRIBUTES             more resource attributes (k=v,…)
//	OTEL_TRACES_SAMPLER, …_ARG           sampler (default parentbased_always_on)
//	OTEL_BSP_*                           batch span processor limits
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// DefaultServiceName is service.name when OTEL_SERVICE_NAME is unset.
const DefaultServiceName = "relay-gateway"

// Exporters Setup knows (Tracing.Exporter).
const (
	ExporterNone = "none"
	ExporterOTLP = "otlp"
)

// Tracing is the process's tracer provider and how to stop it.
type Tracing struct {
	// Provider makes the process's spans: a no-op provider when Exporter
	// is ExporterNone.
	Provider oteltrace.TracerProvider
	// Exporter is ExporterNone or ExporterOTLP.
	Exporter string
	// Endpoint is the OTLP endpoint variable's value ("" when off, or
	// when the exporter's default, http://localhost:4318, is used).
	Endpoint string
	// Shutdown flushes the spans not yet exported and stops the exporter
	// (nothing to do when off). Bounded by ctx.
	Shutdown func(ctx context.Context) error
}

// Check refuses the OTEL_* settings Setup would refuse (an unknown
// OTEL_TRACES_EXPORTER, a protocol other than http/protobuf), without
// building anything: the command checks them with its other settings,
// before it starts.
func Check() error {
	_, _, err := settings()
	return err
}

// settings reads whether tracing is on, and its endpoint, from the
// process environment, refusing the values this build cannot honour.
func settings() (on bool, endpoint string, err error) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false, "", nil
	}
	endpoint = os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	exporter := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")))
	switch {
	case exporter == "" && endpoint == "", exporter == ExporterNone:
		return false, "", nil
	case exporter == "", exporter == ExporterOTLP:
	default:
		return false, "", fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER=%q: this build exports to %q or %q only", exporter, ExporterOTLP, ExporterNone)
	}
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return false, "", fmt.Errorf("telemetry: OTEL_EXPORTER_OTLP_PROTOCOL=%q: this build speaks OTLP over http/protobuf only (a collector's port 4318)", proto)
	}
	return true, endpoint, nil
}

// Setup reads the OTEL_* variables of the process environment and builds
// the tracer provider they describe; version is the build's version
// (service.version). Errors name the variable and its accepted values:
// an unknown OTEL_TRACES_EXPORTER, a protocol other than http/protobuf, a
// malformed endpoint or resource attribute.
func Setup(ctx context.Context, version string) (Tracing, error) {
	off := Tracing{Provider: noop.NewTracerProvider(), Exporter: ExporterNone, Shutdown: func(context.Context) error { return nil }}
	on, endpoint, err := settings()
	if err != nil {
		return Tracing{}, err
	}
	if !on {
		return off, nil
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(DefaultServiceName), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return Tracing{}, fmt.Errorf("telemetry: resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	exp, err := otlptracehttp.New(ctx) // reads OTEL_EXPORTER_OTLP_* itself
	if err != nil {
		return Tracing{}, fmt.Errorf("telemetry: OTLP exporter (OTEL_EXPORTER_OTLP_*): %w", err)
	}
	// The sampler comes from OTEL_TRACES_SAMPLER (default: parent-based,
	// always on), the batcher's limits from OTEL_BSP_*.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return Tracing{Provider: tp, Exporter: ExporterOTLP, Endpoint: endpoint, Shutdown: tp.Shutdown}, nil
}
