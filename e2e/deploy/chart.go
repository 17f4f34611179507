package deploy

import (
	"context"
	"fmt"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/certready/certready/e2e/provider"
)

// ReleaseNamespace is the release's, where the chart puts certready by
// default (helm install -n certready-system --create-namespace).
const ReleaseNamespace = Namespace

// Chart installs certready from the Helm chart in dir with the Helm SDK, as
// `helm install certready <dir> -n certready-system --create-namespace`
// does, and waits as Certready does.
func Chart(ctx context.Context, c provider.Cluster, dir string, values map[string]any, logf func(string, ...any)) error {
	ch, err := loader.Load(dir)
	if err != nil {
		return fmt.Errorf("loading the chart %s: %w", dir, err)
	}
	cfg, err := helmConfig(c, logf)
	if err != nil {
		return err
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.Timeout = "certready", ReleaseNamespace, 2*time.Minute
	install.CreateNamespace = true
	logf("deploying certready: helm install certready %s -n %s (Helm SDK), values %v", dir, ReleaseNamespace, values)
	rel, err := install.RunWithContext(ctx, ch, values)
	if err != nil {
		return fmt.Errorf("helm install: %w", err)
	}
	logf("helm: release %s revision %d %s, %d objects", rel.Name, rel.Version, rel.Info.Status, strings.Count(rel.Manifest, "\nkind: "))
	return WaitRollout(ctx, c, logf)
}

// ChartUpgrade upgrades the release to the chart in dir with values (none
// reused: each call states the whole choice), as `helm upgrade certready
// <dir> -n certready-system --reset-values --set ...` does, without waiting:
// callers wait for what they expect. It returns the release's revision.
func ChartUpgrade(ctx context.Context, c provider.Cluster, dir string, values map[string]any, logf func(string, ...any)) (int, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return 0, fmt.Errorf("loading the chart %s: %w", dir, err)
	}
	cfg, err := helmConfig(c, logf)
	if err != nil {
		return 0, err
	}
	up := action.NewUpgrade(cfg)
	up.Namespace, up.ResetValues, up.Timeout = ReleaseNamespace, true, 2*time.Minute
	logf("helm upgrade certready %s -n %s (Helm SDK), values %v", dir, ReleaseNamespace, values)
	rel, err := up.RunWithContext(ctx, "certready", ch, values)
	if err != nil {
		return 0, fmt.Errorf("helm upgrade: %w", err)
	}
	return rel.Version, nil
}

// ChartRevision is the release's deployed revision, as `helm status` shows.
func ChartRevision(c provider.Cluster, logf func(string, ...any)) (int, error) {
	cfg, err := helmConfig(c, logf)
	if err != nil {
		return 0, err
	}
	rel, err := action.NewStatus(cfg).Run("certready")
	if err != nil {
		return 0, fmt.Errorf("helm status: %w", err)
	}
	return rel.Version, nil
}

func helmConfig(c provider.Cluster, logf func(string, ...any)) (*action.Configuration, error) {
	cfg := new(action.Configuration)
	getter := restGetter{cfg: c.AdminConfig(), namespace: ReleaseNamespace}
	if err := cfg.Init(getter, ReleaseNamespace, "secret", func(format string, args ...any) { logf("helm: "+format, args...) }); err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	return cfg, nil
}

// ChartTest runs the release's test hooks, as `helm test certready` does:
// the chart's `certready status --problems` pod. On failure it returns the
// pod's output.
func ChartTest(ctx context.Context, c provider.Cluster, logf func(string, ...any)) (string, error) {
	cfg, err := helmConfig(c, logf)
	if err != nil {
		return "", err
	}
	test := action.NewReleaseTesting(cfg)
	test.Namespace, test.Timeout = ReleaseNamespace, 2*time.Minute
	rel, runErr := test.Run("certready")
	if runErr == nil {
		// A passed test pod is deleted (hook-succeeded): nothing to show.
		return "every node ready", ctx.Err()
	}
	var out strings.Builder
	if rel != nil {
		if err := test.GetPodLogs(&out, rel); err != nil {
			fmt.Fprintf(&out, "(pod logs: %v)", err)
		}
	}
	return out.String(), fmt.Errorf("helm test certready: %w", runErr)
}

// restGetter gives Helm the cluster admin's client configuration.
type restGetter struct {
	cfg       *rest.Config
	namespace string
}

func (g restGetter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.cfg), nil }

func (g restGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(g.cfg)
	if err != nil {
		return nil, err
	}
	return memory.NewMemCacheClient(dc), nil
}

func (g restGetter) ToRESTMapper() (meta.RESTMapper, error) {
	dc, err := g.ToDiscoveryClient()
	if err != nil {
		return nil, err
	}
	return restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(dc), dc, nil), nil
}

func (g restGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewNonInteractiveClientConfig(*clientcmdapi.NewConfig(), "", &clientcmd.ConfigOverrides{Context: clientcmdapi.Context{Namespace: g.namespace}}, nil)
}
