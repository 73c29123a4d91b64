package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	kcresource "github.com/yannh/kubeconform/pkg/resource"
	"github.com/yannh/kubeconform/pkg/validator"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/imagegate/imagegate/configs"
)

// Every manifest under kubernetes/ and kserve/, and every kustomize rendering, is
//  1. decoded strictly (unknown or duplicate fields are errors, field names case-sensitive)
//     into the official Go types by the API machinery's own decoder: k8s.io/api for
//     Kubernetes' kinds, the Prometheus Operator's for ServiceMonitor and PodMonitor; KServe's
//     Go module pulls in Knative and Istio, so its resources get their embedded containers
//     decoded into corev1.Container and the rest checked by the schema;
//  2. validated by kubeconform against the strict schemas committed in schemas/;
//  3. cross-checked: selectors, ports, probes, the restricted security context, the drain
//     covered by terminationGracePeriodSeconds, the HPA's metrics served by the Prometheus
//     Adapter's rules, KServe's runtime and InferenceService agreeing.
// testdata/broken/ holds manifests that must fail.

// manifestDirs are the folders whose YAML files are manifests: every one but kustomization.yaml
// is a complete object (the overlay's patches too), valid on its own.
var manifestDirs = []string{"kubernetes", "kserve"}

const schemaTemplate = "{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"

type manifest struct {
	file string // for messages: path and document index
	data []byte // one YAML document
	gvk  string // group/version/Kind, "v1/Kind" for the core group
	name string
}

func (m manifest) String() string { return fmt.Sprintf("%s (%s %s)", m.file, m.gvk, m.name) }

// splitDocs splits a YAML stream into its non-empty documents.
func splitDocs(t *testing.T, file string, data []byte) []manifest {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []manifest
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("%s[%d]: %v", file, i, err)
		}
		if head.APIVersion == "" && head.Kind == "" {
			continue // empty document
		}
		out = append(out, manifest{file: fmt.Sprintf("%s[%d]", file, i), data: doc, gvk: head.APIVersion + "/" + head.Kind, name: head.Metadata.Name})
	}
}

func manifestFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, d := range manifestDirs {
		err := filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			n := e.Name()
			if e.IsDir() || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) || n == "kustomization.yaml" {
				return nil
			}
			files = append(files, p)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(files) < 10 {
		t.Fatalf("only %d manifest files found under %v", len(files), manifestDirs)
	}
	return files
}

func readManifests(t *testing.T, files ...string) []manifest {
	t.Helper()
	var ms []manifest
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, splitDocs(t, f, data)...)
	}
	return ms
}

// The API machinery's strict decoder for the kinds that have official Go types here.
var (
	scheme = func() *runtime.Scheme {
		s := runtime.NewScheme()
		for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme,
			policyv1.AddToScheme, autoscalingv2.AddToScheme, monitoringv1.AddToScheme} {
			if err := add(s); err != nil {
				panic(err)
			}
		}
		return s
	}()
	strictCodec = kjsonserializer.NewSerializerWithOptions(kjsonserializer.DefaultMetaFactory, scheme, scheme,
		kjsonserializer.SerializerOptions{Yaml: true, Strict: true})
)

// kserveKinds have no Go types in this module (see the comment at the top).
var kserveKinds = map[string]bool{
	"serving.kserve.io/v1alpha1/ServingRuntime":        true,
	"serving.kserve.io/v1alpha1/ClusterServingRuntime": true,
	"serving.kserve.io/v1beta1/InferenceService":       true,
}

// decodeStrict decodes m into its official Go type, strictly; for KServe's kinds it decodes
// the embedded containers into corev1.Container and returns nil.
func decodeStrict(m manifest) (runtime.Object, error) {
	if kserveKinds[m.gvk] {
		var spec struct {
			Spec struct {
				Containers []any `json:"containers"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(m.data, &spec); err != nil {
			return nil, err
		}
		for i, c := range spec.Spec.Containers {
			var ctr corev1.Container
			if err := strictJSONFromAny(c, &ctr); err != nil {
				return nil, fmt.Errorf("spec.containers[%d]: %w", i, err)
			}
		}
		return nil, nil
	}
	obj, _, err := strictCodec.Decode(m.data, nil, nil)
	if err != nil {
		return nil, err
	}
	return obj, nil
}

// strictYAML decodes YAML into v: unknown and duplicate fields are errors, names case-sensitive.
func strictYAML(data []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, v)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

func strictJSONFromAny(x any, v any) error {
	j, err := yaml.Marshal(x)
	if err != nil {
		return err
	}
	return strictYAML(j, v)
}

func newValidator(t *testing.T) validator.Validator {
	t.Helper()
	dir, err := filepath.Abs("schemas")
	if err != nil {
		t.Fatal(err)
	}
	v, err := validator.New([]string{filepath.Join(dir, schemaTemplate)}, validator.Opts{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// schemaCheck validates m with kubeconform; nil when valid.
func schemaCheck(v validator.Validator, m manifest) error {
	r := v.ValidateResource(kcresource.Resource{Path: m.file, Bytes: m.data})
	if r.Status == validator.Valid {
		return nil
	}
	msg := fmt.Sprintf("kubeconform: status %d: %v", r.Status, r.Err)
	for _, e := range r.ValidationErrors {
		msg += fmt.Sprintf("\n  %s: %s", e.Path, e.Msg)
	}
	return errors.New(msg)
}

// validate runs both checks on every manifest and returns the decoded objects.
func validate(t *testing.T, v validator.Validator, ms []manifest) []runtime.Object {
	t.Helper()
	var objs []runtime.Object
	for _, m := range ms {
		obj, err := decodeStrict(m)
		if err != nil {
			t.Errorf("%s: strict decoding into the official type: %v", m, err)
		}
		if obj != nil {
			objs = append(objs, obj)
		}
		if err := schemaCheck(v, m); err != nil {
			t.Errorf("%s: %v", m, err)
		}
	}
	return objs
}

func TestManifestFilesAreValid(t *testing.T) {
	v := newValidator(t)
	ms := readManifests(t, manifestFiles(t)...)
	validate(t, v, ms)
	t.Logf("%d manifests checked", len(ms))
}

func TestKustomizationsRenderValid(t *testing.T) {
	v := newValidator(t)
	var dirs []string
	filepath.WalkDir("kubernetes", func(p string, e os.DirEntry, err error) error {
		if err == nil && e.Name() == "kustomization.yaml" {
			dirs = append(dirs, filepath.Dir(p))
		}
		return err
	})
	if len(dirs) < 2 {
		t.Fatalf("want a base and an overlay, found kustomizations in %v", dirs)
	}
	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			var k types.Kustomization
			if err := strictYAML(data, &k); err != nil {
				t.Fatalf("kustomization.yaml, decoded strictly into kustomize's types.Kustomization: %v", err)
			}
			ms := render(t, dir)
			objs := validate(t, v, ms)
			checkGatewayResources(t, dir, objs)
		})
	}
}

// render runs kustomize (as a library: kubectl apply -k does the same) on dir.
func render(t *testing.T, dir string) []manifest {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := rm.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return splitDocs(t, "kustomize build "+dir, out)
}

// checkGatewayResources cross-checks one rendering of the base or an overlay.
func checkGatewayResources(t *testing.T, dir string, objs []runtime.Object) {
	var (
		deps     []*appsv1.Deployment
		svcs     []*corev1.Service
		pdbs     []*policyv1.PodDisruptionBudget
		hpas     []*autoscalingv2.HorizontalPodAutoscaler
		monitors []*monitoringv1.ServiceMonitor
		cms      = map[string]*corev1.ConfigMap{}
	)
	for _, o := range objs {
		switch x := o.(type) {
		case *appsv1.Deployment:
			deps = append(deps, x)
		case *corev1.Service:
			svcs = append(svcs, x)
		case *policyv1.PodDisruptionBudget:
			pdbs = append(pdbs, x)
		case *autoscalingv2.HorizontalPodAutoscaler:
			hpas = append(hpas, x)
		case *monitoringv1.ServiceMonitor:
			monitors = append(monitors, x)
		case *corev1.ConfigMap:
			cms[x.Name] = x
		}
	}
	if len(deps) != 1 || len(svcs) != 1 || len(pdbs) != 1 || len(hpas) != 1 || len(monitors) != 1 {
		t.Fatalf("%s renders %d Deployments, %d Services, %d PodDisruptionBudgets, %d HPAs, %d ServiceMonitors; want one each",
			dir, len(deps), len(svcs), len(pdbs), len(hpas), len(monitors))
	}
	d, svc, pdb, hpa, sm := deps[0], svcs[0], pdbs[0], hpas[0], monitors[0]
	pod := d.Spec.Template
	if !subset(d.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("Deployment selector %v does not select its pods %v", d.Spec.Selector.MatchLabels, pod.Labels)
	}
	ctr := checkContainer(t, "Deployment "+d.Name, pod.Spec.Containers, pod.Spec.SecurityContext)
	if d.Spec.Replicas != nil && hpa.Spec.ScaleTargetRef.Name == d.Name {
		// Each apply would write it over the count the HPA chose (scaling a busy fleet down),
		// as Kubernetes' HPA documentation warns.
		t.Errorf("Deployment %s sets replicas (%d) while HPA %s owns the count", d.Name, *d.Spec.Replicas, hpa.Name)
	}

	// The config comes from a ConfigMap of this rendering, mounted where -config points.
	cfgPath := argValue(ctr.Args, "-config")
	if cfgPath == "" {
		t.Fatalf("the container's args %v give no -config", ctr.Args)
	}
	var cm *corev1.ConfigMap
	for _, vm := range ctr.VolumeMounts {
		if !strings.HasPrefix(cfgPath, vm.MountPath+"/") {
			continue
		}
		for _, vol := range pod.Spec.Volumes {
			if vol.Name == vm.Name && vol.ConfigMap != nil {
				cm = cms[vol.ConfigMap.Name]
				if cm == nil {
					t.Fatalf("volume %s names ConfigMap %s, which the rendering does not hold", vol.Name, vol.ConfigMap.Name)
				}
			}
		}
	}
	if cm == nil {
		t.Fatalf("-config %s is not in a volume mounted from a ConfigMap", cfgPath)
	}
	cfgText, ok := cm.Data[filepath.Base(cfgPath)]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", cm.Name, filepath.Base(cfgPath))
	}
	cfg := parseGatewayConfig(t, "ConfigMap "+cm.Name, cfgText)
	if want := map[string]int{"kubernetes/base": 256, "kubernetes/overlays/example": 128, "kubernetes/overlays/tls": 256}[filepath.ToSlash(dir)]; cfg.maxQueue != want {
		t.Errorf("%s: the config's max_queue_size is %d, want %d (the overlay's ConfigMap patch replaces the base's config)", dir, cfg.maxQueue, want)
	}

	// The drain fits in the grace period.
	grace := time.Duration(*d.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	// The gateway's drain lasts at most drain_delay + shutdown_timeout + 4 s (gateway.ShutdownTail:
	// the 503s after shutdown_timeout, then idle keep-alive connections).
	if need := cfg.drainDelay + cfg.shutdownTimeout + 4*time.Second; grace < need {
		t.Errorf("terminationGracePeriodSeconds %v < server.drain_delay %v + server.shutdown_timeout %v + 4s", grace, cfg.drainDelay, cfg.shutdownTimeout)
	}
	if cfg.drainDelay < 2*time.Second {
		t.Errorf("server.drain_delay %v: the endpoint removal needs a few seconds to reach every load balancer", cfg.drainDelay)
	}
	// The pod's CPUs match what the config keeps busy.
	cpu := ctr.Resources.Limits.Cpu().Value()
	if int64(cfg.decodeWorkers) != cpu {
		t.Errorf("server.decode_workers %d != the CPU limit %d", cfg.decodeWorkers, cpu)
	}
	if int64(cfg.sessionThreads) > cpu {
		t.Errorf("runtime.instances x intra_op_threads = %d > the CPU limit %d", cfg.sessionThreads, cpu)
	}
	if d.Spec.Strategy.RollingUpdate == nil || d.Spec.Strategy.RollingUpdate.MaxUnavailable == nil || d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Errorf("the rollout should keep every replica until its replacement is ready (maxUnavailable: 0)")
	}

	// Service, PodDisruptionBudget, HPA and ServiceMonitor find what they are for.
	if !subset(svc.Spec.Selector, pod.Labels) || len(svc.Spec.Selector) == 0 {
		t.Errorf("Service selector %v does not select the pods %v", svc.Spec.Selector, pod.Labels)
	}
	for _, p := range svc.Spec.Ports {
		if p.TargetPort.String() != p.Name || !slices.ContainsFunc(ctr.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == p.Name }) {
			t.Errorf("Service port %s targets %s, want the container's port of the same name", p.Name, p.TargetPort.String())
		}
	}
	checkListeners(t, "Deployment "+d.Name, ctr, argValue(ctr.Args, "-listen"), argValue(ctr.Args, "-grpc-listen"), "grpc")
	// gRPC is HTTP/2 in clear text, or TLS: the Service says so to the proxies that read
	// appProtocol.
	_, grpcTLS := cfg.cfg.Server.TLS.For("grpc")
	wantAP := map[bool]string{false: "kubernetes.io/h2c", true: "https"}[grpcTLS]
	if i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "grpc" }); i < 0 {
		t.Errorf("Service %s has no port named grpc", svc.Name)
	} else if ap := svc.Spec.Ports[i].AppProtocol; ap == nil || *ap != wantAP {
		got := "none"
		if ap != nil {
			got = *ap
		}
		t.Errorf("Service port grpc: appProtocol %s, want %s", got, wantAP)
	}
	checkSecrets(t, dir, cfg.cfg, pod.Spec, ctr, sm)
	if pdb.Spec.Selector == nil || !subset(pdb.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("PodDisruptionBudget selector does not select the pods")
	}
	if hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Spec.ScaleTargetRef.Name != d.Name {
		t.Errorf("HPA targets %s %s, want Deployment %s", hpa.Spec.ScaleTargetRef.Kind, hpa.Spec.ScaleTargetRef.Name, d.Name)
	}
	if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 2 {
		t.Errorf("HPA minReplicas should be at least 2 (the PodDisruptionBudget lets one go at a time)")
	}
	checkHPAMetrics(t, hpa)
	if !subset(sm.Spec.Selector.MatchLabels, svc.Labels) {
		t.Errorf("ServiceMonitor selector %v does not select the Service's labels %v", sm.Spec.Selector.MatchLabels, svc.Labels)
	}
	for _, e := range sm.Spec.Endpoints {
		if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == e.Port }) {
			t.Errorf("ServiceMonitor endpoint port %q is not a port of the Service", e.Port)
		}
		if e.Path != "/metrics" {
			t.Errorf("ServiceMonitor path %q, want /metrics", e.Path)
		}
	}
}

// checkContainer checks the one container of the gateway's pod: probes, port, resources and
// the restricted Pod Security Standard. It returns the container.
func checkContainer(t *testing.T, what string, ctrs []corev1.Container, podSC *corev1.PodSecurityContext) corev1.Container {
	t.Helper()
	if len(ctrs) != 1 {
		t.Fatalf("%s: %d containers, want 1", what, len(ctrs))
	}
	c := ctrs[0]
	port := int32(0)
	for _, p := range c.Ports {
		if p.Name == "http" || p.Name == "http1" || p.Name == "https" || len(c.Ports) == 1 { // http1: Knative's name
			port = p.ContainerPort
		}
	}
	if port == 0 {
		t.Errorf("%s: no container port (named http or http1)", what)
	}
	probe := func(name string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", what, name)
			return
		}
		if p.HTTPGet.Path != path {
			t.Errorf("%s: %s probe on %s, want %s", what, name, p.HTTPGet.Path, path)
		}
		if pp := p.HTTPGet.Port; pp.String() != "http" && pp.IntValue() != int(port) {
			t.Errorf("%s: %s probe on port %s, want the container's port %d", what, name, pp.String(), port)
		}
	}
	probe("liveness", c.LivenessProbe, "/v2/health/live")
	probe("readiness", c.ReadinessProbe, "/v2/health/ready")

	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okReq := c.Resources.Requests[r]
		lim, okLim := c.Resources.Limits[r]
		if !okReq || !okLim {
			t.Errorf("%s: %s needs both a request and a limit", what, r)
		} else if req.Cmp(lim) > 0 {
			t.Errorf("%s: %s request %s above its limit %s", what, r, req.String(), lim.String())
		}
	}

	sc := c.SecurityContext
	if sc == nil {
		t.Fatalf("%s: no securityContext", what)
	}
	nonRoot := sc.RunAsNonRoot != nil && *sc.RunAsNonRoot || podSC != nil && podSC.RunAsNonRoot != nil && *podSC.RunAsNonRoot
	if !nonRoot {
		t.Errorf("%s: runAsNonRoot is not set", what)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation must be false", what)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: readOnlyRootFilesystem must be true", what)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("%s: privileged", what)
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("%s: capabilities must drop ALL and add none", what)
	}
	// Restricted: a seccomp profile on the pod or on the container (a ServingRuntime has no
	// pod-level security context: it must be the container's).
	seccomp := func(p *corev1.SeccompProfile) bool {
		return p != nil && (p.Type == corev1.SeccompProfileTypeRuntimeDefault || p.Type == corev1.SeccompProfileTypeLocalhost)
	}
	if !seccomp(sc.SeccompProfile) && (podSC == nil || !seccomp(podSC.SeccompProfile)) {
		t.Errorf("%s: no seccompProfile RuntimeDefault on the pod or the container (the restricted Pod Security Standard refuses the pod)", what)
	}
	return c
}

// checkHPAMetrics: CPU and the queue, each pods metric served by an adapter rule.
func checkHPAMetrics(t *testing.T, hpa *autoscalingv2.HorizontalPodAutoscaler) {
	t.Helper()
	served := adapterMetrics(t)
	var cpu, queue bool
	for _, m := range hpa.Spec.Metrics {
		switch {
		case m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource.Name == corev1.ResourceCPU:
			cpu = true
		case m.Type == autoscalingv2.PodsMetricSourceType:
			if !served[m.Pods.Metric.Name] {
				t.Errorf("HPA %s: pods metric %s is served by no rule of kubernetes/base/prometheus-adapter-rules.yaml", hpa.Name, m.Pods.Metric.Name)
			}
			if m.Pods.Metric.Name == "gateway_queue_length" {
				queue = true
			}
		}
	}
	if !cpu || !queue {
		t.Errorf("HPA %s: want a CPU metric and the pods metric gateway_queue_length (cpu %v, queue %v)", hpa.Name, cpu, queue)
	}
}

// adapterConfig is the Prometheus Adapter's rule file format (its docs/config.md): only the
// fields used here, decoded strictly so that a misspelt key fails.
type adapterConfig struct {
	Rules []struct {
		SeriesQuery   string `json:"seriesQuery"`
		SeriesFilters []struct {
			Is    string `json:"is,omitempty"`
			IsNot string `json:"isNot,omitempty"`
		} `json:"seriesFilters,omitempty"`
		Resources struct {
			Overrides map[string]struct {
				Group    string `json:"group,omitempty"`
				Resource string `json:"resource"`
			} `json:"overrides,omitempty"`
			Template string `json:"template,omitempty"`
		} `json:"resources"`
		Name struct {
			Matches string `json:"matches"`
			As      string `json:"as"`
		} `json:"name"`
		MetricsQuery string `json:"metricsQuery"`
	} `json:"rules"`
}

// adapterMetrics returns the custom metric names the adapter's rules serve, after checking them.
func adapterMetrics(t *testing.T) map[string]bool {
	t.Helper()
	ms := readManifests(t, filepath.Join("kubernetes", "base", "prometheus-adapter-rules.yaml"))
	if len(ms) != 1 {
		t.Fatalf("prometheus-adapter-rules.yaml: %d documents, want 1", len(ms))
	}
	obj, err := decodeStrict(ms[0])
	if err != nil {
		t.Fatal(err)
	}
	cm := obj.(*corev1.ConfigMap)
	var cfg adapterConfig
	if err := strictYAML([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatalf("prometheus-adapter-rules.yaml config.yaml: %v", err)
	}
	served := map[string]bool{}
	for i, r := range cfg.Rules {
		if _, err := template.New("q").Delims("<<", ">>").Parse(r.MetricsQuery); err != nil {
			t.Errorf("rule %d: metricsQuery: %v", i, err)
		}
		for _, label := range []string{"namespace", "pod"} {
			if _, ok := r.Resources.Overrides[label]; !ok {
				t.Errorf("rule %d: the %s label is not mapped to a resource (the HPA asks per pod)", i, label)
			}
		}
		if !strings.HasPrefix(r.SeriesQuery, "gateway_") || r.Name.As == "" {
			t.Errorf("rule %d: seriesQuery %q, name.as %q", i, r.SeriesQuery, r.Name.As)
		}
		served[r.Name.As] = true
	}
	return served
}

// AdapterSeries lists the gateway metrics the adapter's rules read: the rootfs test checks
// that the gateway exports each of them.
func adapterSeries(t *testing.T) []string {
	t.Helper()
	ms := readManifests(t, filepath.Join("kubernetes", "base", "prometheus-adapter-rules.yaml"))
	obj, err := decodeStrict(ms[0])
	if err != nil {
		t.Fatal(err)
	}
	var cfg adapterConfig
	if err := strictYAML([]byte(obj.(*corev1.ConfigMap).Data["config.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range cfg.Rules {
		for _, q := range []string{r.SeriesQuery, r.MetricsQuery} {
			for _, f := range strings.FieldsFunc(q, func(c rune) bool {
				return !(c == '_' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9')
			}) {
				if strings.HasPrefix(f, "gateway_") && !slices.Contains(names, f) {
					names = append(names, f)
				}
			}
		}
	}
	return names
}

type gatewayConfig struct {
	cfg                         *configs.Config
	drainDelay, shutdownTimeout time.Duration
	decodeWorkers               int
	sessionThreads              int
	maxQueue                    int
}

// parseGatewayConfig parses the gateway's config with the gateway's own strict loader
// (configs.Parse), and returns what the manifests must agree with.
func parseGatewayConfig(t *testing.T, what, text string) gatewayConfig {
	t.Helper()
	cfg, err := configs.Parse([]byte(text), "/")
	if err != nil {
		t.Fatalf("%s: the gateway's strict config loader refuses it: %v", what, err)
	}
	g := gatewayConfig{cfg: cfg, drainDelay: time.Duration(cfg.Server.DrainDelay), shutdownTimeout: time.Duration(cfg.Server.ShutdownTimeout), decodeWorkers: cfg.Server.DecodeWorkers}
	for _, m := range cfg.Models {
		g.sessionThreads += m.Runtime.Instances * m.Runtime.IntraOpThreads
		g.maxQueue = m.Batching.MaxQueueSize
	}
	return g
}

// checkSecrets: the certificate, key and key files the configuration names lie in volumes
// mounted from Secrets (never the ConfigMap: keys are not configuration); with TLS on the
// public listener, the probes and the scrape speak HTTPS; the TLS overlay has both.
func checkSecrets(t *testing.T, dir string, cfg *configs.Config, pod corev1.PodSpec, ctr corev1.Container, sm *monitoringv1.ServiceMonitor) {
	t.Helper()
	secretOf := func(path string) string {
		for _, vm := range ctr.VolumeMounts {
			if !strings.HasPrefix(path, vm.MountPath+"/") {
				continue
			}
			for _, v := range pod.Volumes {
				if v.Name == vm.Name && v.Secret != nil {
					return v.Secret.SecretName
				}
			}
		}
		return ""
	}
	var files []string
	for _, l := range []string{"http", "grpc", "admin"} {
		if tl, on := cfg.Server.TLS.For(l); on {
			files = append(files, tl.CertFile, tl.KeyFile, tl.ClientCAFile)
		}
	}
	files = append(files, cfg.Server.APIKeys.File)
	for _, f := range files {
		if f != "" && secretOf(f) == "" {
			t.Errorf("%s: %s is not in a volume mounted from a Secret", dir, f)
		}
	}
	_, httpTLS := cfg.Server.TLS.For("http")
	for name, p := range map[string]*corev1.Probe{"startup": ctr.StartupProbe, "liveness": ctr.LivenessProbe, "readiness": ctr.ReadinessProbe} {
		if p != nil && p.HTTPGet != nil && (p.HTTPGet.Scheme == corev1.URISchemeHTTPS) != httpTLS {
			t.Errorf("%s: the %s probe's scheme is %q with TLS %v on the public listener", dir, name, p.HTTPGet.Scheme, httpTLS)
		}
	}
	for _, e := range sm.Spec.Endpoints {
		if (e.Scheme == "https") != httpTLS {
			t.Errorf("%s: the ServiceMonitor's scheme %v with TLS %v on the public listener", dir, e.Scheme, httpTLS)
		}
	}
	if filepath.ToSlash(dir) == "kubernetes/overlays/tls" && (!httpTLS || cfg.Server.APIKeys.File == "" || !slices.Contains(cfg.Server.APIKeys.Open, "health")) {
		t.Errorf("%s: the TLS overlay should serve TLS and keys, health open for the probes", dir)
	}
}

func argValue(args []string, flag string) string {
	for i, a := range args {
		for _, f := range []string{flag, "-" + flag} {
			if a == f && i+1 < len(args) {
				return args[i+1]
			}
			if v, ok := strings.CutPrefix(a, f+"="); ok {
				return v
			}
		}
	}
	return ""
}

// checkListeners: the gateway listens on every interface, HTTP on the container's http (or
// http1) port and gRPC on the one named grpcName, each declared once over TCP.
func checkListeners(t *testing.T, what string, c corev1.Container, httpAddr, grpcAddr, grpcName string) {
	t.Helper()
	ports := map[string]int32{}
	for _, p := range c.Ports {
		if _, dup := ports[p.Name]; dup || p.Protocol != corev1.ProtocolTCP {
			t.Errorf("%s: container port %q declared twice or not TCP (%s)", what, p.Name, p.Protocol)
		}
		ports[p.Name] = p.ContainerPort
	}
	httpPort, ok := ports["http"]
	if !ok {
		httpPort = ports["http1"]
	}
	for _, l := range []struct {
		proto, addr string
		port        int32
	}{{"HTTP", httpAddr, httpPort}, {"gRPC", grpcAddr, ports[grpcName]}} {
		host, port, err := net.SplitHostPort(l.addr)
		if err != nil || host != "0.0.0.0" || port != strconv.Itoa(int(l.port)) || l.port == 0 {
			t.Errorf("%s: the %s listener is %q, want 0.0.0.0 on the container's port (%d)", what, l.proto, l.addr, l.port)
		}
	}
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// KServe's objects, without their Go types: just the fields the cross-checks need (not
// strict: the schema already was).
type servingRuntime struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Labels                map[string]string `json:"labels"`
		SupportedModelFormats []struct {
			Name string `json:"name"`
		} `json:"supportedModelFormats"`
		ProtocolVersions []string           `json:"protocolVersions"`
		Containers       []corev1.Container `json:"containers"`
	} `json:"spec"`
}

type inferenceService struct {
	Metadata struct {
		Name        string            `json:"name"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Predictor struct {
			TerminationGracePeriodSeconds *int64                     `json:"terminationGracePeriodSeconds"`
			DeploymentStrategy            *appsv1.DeploymentStrategy `json:"deploymentStrategy"`
			Model                         struct {
				ModelFormat struct {
					Name string `json:"name"`
				} `json:"modelFormat"`
				Runtime         string `json:"runtime"`
				ProtocolVersion string `json:"protocolVersion"`
				StorageURI      string `json:"storageUri"`
			} `json:"model"`
		} `json:"predictor"`
	} `json:"spec"`
}

func TestKServeRuntimeAndInferenceService(t *testing.T) {
	var rt servingRuntime
	var isvc inferenceService
	var hpa *autoscalingv2.HorizontalPodAutoscaler
	var pm *monitoringv1.PodMonitor
	var pdb *policyv1.PodDisruptionBudget
	for _, m := range readManifests(t, manifestFiles(t)...) {
		if !strings.HasPrefix(m.file, "kserve") || strings.HasPrefix(m.file, filepath.Join("kserve", "tls")) {
			continue // kserve/tls/ is the TLS variant's (TestKServeTLSRuntime)
		}
		switch m.gvk {
		case "serving.kserve.io/v1alpha1/ServingRuntime":
			if strings.HasSuffix(m.file, "servingruntime-triton.yaml") {
				continue // TestKServeTritonRuntime
			}
			if err := yaml.Unmarshal(m.data, &rt); err != nil {
				t.Fatal(err)
			}
		case "serving.kserve.io/v1beta1/InferenceService":
			if err := yaml.Unmarshal(m.data, &isvc); err != nil {
				t.Fatal(err)
			}
		default:
			obj, err := decodeStrict(m)
			if err != nil {
				t.Fatalf("%s: %v", m, err)
			}
			switch x := obj.(type) {
			case *autoscalingv2.HorizontalPodAutoscaler:
				hpa = x
			case *monitoringv1.PodMonitor:
				pm = x
			case *policyv1.PodDisruptionBudget:
				pdb = x
			}
		}
	}
	if rt.Metadata.Name == "" || isvc.Metadata.Name == "" || hpa == nil || pm == nil || pdb == nil {
		t.Fatal("kserve/ should hold a ServingRuntime, an InferenceService, an HPA, a PodMonitor and a PodDisruptionBudget")
	}
	c := checkContainer(t, "ServingRuntime "+rt.Metadata.Name, rt.Spec.Containers, nil)
	// The args KServe passes to custom runtimes; the gateway's kserve.go takes exactly these
	// (rootfs_test.go runs the container's binary with them).
	for _, want := range []string{"--model_name={{.Name}}", "--model_dir=/mnt/models", "--http_port=8080"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("ServingRuntime args %v lack %s", c.Args, want)
		}
	}
	// HTTP first: in Standard mode KServe's Service maps its port 80 to the first container
	// port and keeps the others' numbers. The gRPC port is named h2c, the name by which
	// Knative and KServe know a port that speaks HTTP/2 without TLS.
	if len(c.Ports) != 2 || c.Ports[0].ContainerPort != 8080 || c.Ports[1].Name != "h2c" {
		t.Errorf("ServingRuntime container ports %v, want 8080 (--http_port) then one named h2c (gRPC)", c.Ports)
	}
	checkListeners(t, "ServingRuntime "+rt.Metadata.Name, c, "0.0.0.0:"+argValue(c.Args, "-http_port"), argValue(c.Args, "-grpc-listen"), "h2c")
	if !slices.ContainsFunc(rt.Spec.SupportedModelFormats, func(f struct {
		Name string `json:"name"`
	}) bool {
		return f.Name == "onnx"
	}) || !slices.Contains(rt.Spec.ProtocolVersions, "v2") || !slices.Contains(rt.Spec.ProtocolVersions, "grpc-v2") {
		t.Errorf("ServingRuntime should support model format onnx over protocols v2 and grpc-v2, got %v", rt.Spec.ProtocolVersions)
	}
	m := isvc.Spec.Predictor.Model
	if m.Runtime != rt.Metadata.Name || m.ModelFormat.Name != "onnx" || m.ProtocolVersion != "v2" || m.StorageURI == "" {
		t.Errorf("InferenceService predictor model %+v should ask for runtime %s, format onnx, protocol v2, with a storageUri", m, rt.Metadata.Name)
	}
	// Without a gateway.yaml in the model directory the drain takes model-directory mode's
	// defaults (cmd/gateway/kserve.go): drain_delay 5s + shutdown_timeout 20s.
	if g := isvc.Spec.Predictor.TerminationGracePeriodSeconds; g == nil || *g < 29 {
		t.Errorf("InferenceService predictor terminationGracePeriodSeconds should cover the default drain (5s + 20s + 4s)")
	}
	if isvc.Metadata.Annotations["serving.kserve.io/autoscalerClass"] != "external" ||
		hpa.Spec.ScaleTargetRef.Name != isvc.Metadata.Name+"-predictor" {
		t.Errorf("the queue-aware HPA replaces KServe's (autoscalerClass external) and targets %s-predictor, got %s", isvc.Metadata.Name, hpa.Spec.ScaleTargetRef.Name)
	}
	checkHPAMetrics(t, hpa)
	// The plain Deployment's safeguards: rollouts keep capacity, disruptions take one pod at
	// a time, the HPA scales down as slowly.
	if ds := isvc.Spec.Predictor.DeploymentStrategy; ds == nil || ds.RollingUpdate == nil || ds.RollingUpdate.MaxUnavailable == nil ||
		ds.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Errorf("InferenceService predictor deploymentStrategy should be a rolling update with maxUnavailable 0, got %+v", ds)
	}
	if hpa.Spec.Behavior == nil || hpa.Spec.Behavior.ScaleDown == nil || len(hpa.Spec.Behavior.ScaleDown.Policies) == 0 {
		t.Errorf("HPA %s has no scale-down behavior (Kubernetes' default removes up to every pod per 15 s)", hpa.Name)
	}
	predictorLabels := map[string]string{"component": "predictor", "serving.kserve.io/inferenceservice": isvc.Metadata.Name}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || !subset(pdb.Spec.Selector.MatchLabels, predictorLabels) {
		t.Errorf("PodDisruptionBudget %s should let one predictor pod of %s go at a time, got %+v", pdb.Name, isvc.Metadata.Name, pdb.Spec)
	}
	podLabels := map[string]string{"component": "predictor"}
	for k, v := range rt.Spec.Labels {
		podLabels[k] = v
	}
	if !subset(pm.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("PodMonitor selector %v does not select the predictor pods %v", pm.Spec.Selector.MatchLabels, podLabels)
	}
}

// TestKServeTLSRuntime: the TLS variant of the ServingRuntime passes the container checks,
// reads its certificate, key and key file from Secret volumes, and probes over HTTPS.
func TestKServeTLSRuntime(t *testing.T) {
	var rt servingRuntime
	var spec struct {
		Spec struct {
			Volumes []corev1.Volume `json:"volumes"`
		} `json:"spec"`
	}
	ms := readManifests(t, filepath.Join("kserve", "tls", "servingruntime.yaml"))
	if len(ms) != 1 {
		t.Fatalf("%d documents", len(ms))
	}
	if err := yaml.Unmarshal(ms[0].data, &rt); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(ms[0].data, &spec); err != nil {
		t.Fatal(err)
	}
	c := checkContainer(t, "ServingRuntime "+rt.Metadata.Name, rt.Spec.Containers, nil)
	secrets := map[string]string{} // mount path: Secret
	for _, vm := range c.VolumeMounts {
		for _, v := range spec.Spec.Volumes {
			if v.Name == vm.Name && v.Secret != nil {
				secrets[vm.MountPath] = v.Secret.SecretName
			}
		}
	}
	for _, flag := range []string{"-tls-cert", "-tls-key", "-api-keys"} {
		p := argValue(c.Args, flag)
		if p == "" || secrets[filepath.Dir(p)] == "" {
			t.Errorf("%s %q is not a file of a Secret volume (%v)", flag, p, secrets)
		}
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("the %s probe speaks %s, not HTTPS", name, p.HTTPGet.Scheme)
		}
	}
	if rt.Metadata.Name == "imagegate" {
		t.Error("the TLS runtime has the plain runtime's name")
	}
}

// TestBrokenManifestsFail: each file in testdata/broken/ must be refused by every check that
// applies to its kind: the strict decoding into the official type and kubeconform.
func TestBrokenManifestsFail(t *testing.T) {
	v := newValidator(t)
	files, _ := filepath.Glob(filepath.Join("testdata", "broken", "*.yaml"))
	if len(files) < 3 {
		t.Fatalf("testdata/broken holds %d files", len(files))
	}
	for _, m := range readManifests(t, files...) {
		if _, err := decodeStrict(m); err == nil {
			if !kserveKinds[m.gvk] || strings.Contains(m.file, "container") {
				t.Errorf("%s: the strict decoding accepts it", m)
			}
		} else {
			t.Logf("%s: strict decoding: %v", m, err)
		}
		if err := schemaCheck(v, m); err == nil {
			t.Errorf("%s: kubeconform accepts it", m)
		} else {
			t.Logf("%s: %v", m, err)
		}
	}
}

// TestKServeTritonRuntime: the runtime that stands in for KServe's Triton runtime passes
// kserve-tritonserver's args word for word, and the gateway listens where they say on every
// interface, on the container's ports (rootfs_test.go runs the container's binary with them).
func TestKServeTritonRuntime(t *testing.T) {
	var rt servingRuntime
	for _, m := range readManifests(t, filepath.Join("kserve", "servingruntime-triton.yaml")) {
		if err := yaml.Unmarshal(m.data, &rt); err != nil {
			t.Fatal(err)
		}
	}
	c := checkContainer(t, "ServingRuntime "+rt.Metadata.Name, rt.Spec.Containers, nil)
	want := []string{"tritonserver", "--model-store=/mnt/models", "--grpc-port=9000", "--http-port=8080", "--allow-grpc=true", "--allow-http=true"}
	if !slices.Equal(c.Args, want) {
		t.Errorf("ServingRuntime %s args %v, want KServe's Triton runtime's %v", rt.Metadata.Name, c.Args, want)
	}
	if len(c.Ports) != 2 || c.Ports[0].ContainerPort != 8080 || c.Ports[1].Name != "h2c" {
		t.Errorf("ServingRuntime %s container ports %v, want 8080 then one named h2c (gRPC)", rt.Metadata.Name, c.Ports)
	}
	checkListeners(t, "ServingRuntime "+rt.Metadata.Name, c, "0.0.0.0:"+argValue(c.Args, "-http-port"), "0.0.0.0:"+argValue(c.Args, "-grpc-port"), "h2c")
	if !slices.ContainsFunc(rt.Spec.SupportedModelFormats, func(f struct {
		Name string `json:"name"`
	}) bool {
		return f.Name == "triton"
	}) || !slices.Contains(rt.Spec.ProtocolVersions, "grpc-v2") {
		t.Errorf("ServingRuntime %s should support model format triton over v2 and grpc-v2", rt.Metadata.Name)
	}
}
