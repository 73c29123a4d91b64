// Package deploy holds no code: it is the Go module of imagegate's deployment files, whose
// tests check them offline.
//
//   - kubernetes/: a kustomize base (Deployment, Service, PodDisruptionBudget,
//     HorizontalPodAutoscaler, ServiceMonitor, the config as a ConfigMap) and an example overlay,
//     with the Prometheus Adapter's rules for the queue metrics;
//   - kserve/: a ServingRuntime, an InferenceService, its HorizontalPodAutoscaler, a PodMonitor;
//   - monitoring/: Prometheus recording and alerting rules (also rendered as a PrometheusRule in
//     kubernetes/base), their promtool unit tests, and a Grafana dashboard;
//   - schemas/: strict JSON schemas for kubeconform (schemas/README.md: sources and licenses),
//     made by cmd/schemagen;
//   - the tests: every manifest and every kustomize rendering decoded strictly into the
//     official Go types (k8s.io/api, the Prometheus Operator's) where they exist, validated
//     with kubeconform against the committed schemas, and cross-checked (selectors, probes,
//     the drain covered by terminationGracePeriodSeconds, metric names); testdata/broken/
//     must fail; the container's runtime file set (scripts/rootfs.sh) serving the
//     default model with nothing but its own libraries; and the monitoring files checked by
//     promtool, by the Grafana Foundation SDK's strict decoding, and against a running gateway
//     and a real Prometheus server (monitoring_gateway_test.go).
//
// The module is separate so that the server's go.mod stays free of k8s.io/api, kubeconform
// and kustomize; the server's root module does not descend into it.
package deploy
