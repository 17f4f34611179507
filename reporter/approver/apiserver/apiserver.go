// Package apiserver learns the API server's own names and addresses, with
// no configuration: a serving certificate for one of them, signed by the
// cluster CA, would let its holder pose as the API server to every client
// that trusts that CA, so the approver refuses them (policy.APIServer).
//
// Sources, each watched or re-read so that a change is seen without a
// restart:
//   - the EndpointSlice of the default/kubernetes Service, which the API
//     servers keep themselves (their advertised addresses: on kubeadm and
//     kind, a control-plane node's own InternalIP);
//   - that Service's ClusterIPs;
//   - the host of the approver's own kubeconfig or in-cluster config;
//   - the server in kube-public/cluster-info (kubeadm's published address,
//     often a load balancer's name);
//   - the SANs of the certificate the API server presents to the approver
//     (its external names, load balancer and VIP addresses), read again
//     every Refresh;
//   - Extra: what the caller knows besides (Cluster API's
//     spec.controlPlaneEndpoint).
package apiserver

import (
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/certready/certready/reporter/approver/policy"
)

// Namespace and Name of the API server's Service and EndpointSlice, and
// where kubeadm publishes the cluster's address.
const (
	Namespace            = "default"
	Name                 = "kubernetes"
	clusterInfoNamespace = "kube-public"
	clusterInfoName      = "cluster-info"
)

// Where each address or name was learned, for refusal messages.
const (
	SourceEndpoint    = "an endpoint of default/kubernetes"
	SourceServiceIP   = "a ClusterIP of the default/kubernetes Service"
	SourceClientHost  = "the host the approver reaches the API server at"
	SourceClusterInfo = "the server in kube-public/cluster-info"
	SourceCertificate = "in the certificate the API server presents"
)

// defaultRefresh is how often the API server's certificate is read again.
const defaultRefresh = 10 * time.Minute

// Config says where to learn from.
type Config struct {
	// Client reads the Service, EndpointSlice and cluster-info.
	Client kubernetes.Interface
	// REST, when set, is the approver's own connection: its host is one of
	// the API server's, and its certificate is read through it.
	REST *rest.Config
	// Extra are names or addresses known besides, with their source.
	Extra map[string]string
	// Refresh: how often the certificate is read again (defaultRefresh).
	Refresh time.Duration
	// OnChange runs after the learned identity changed.
	OnChange func()
}

// Identity is the learned identity, kept current.
type Identity struct {
	cfg       Config
	current   atomic.Pointer[policy.APIServer]
	factories []informers.SharedInformerFactory
	synced    []cache.InformerSynced

	slices, services, clusterInfo cache.Store

	mu        sync.Mutex
	certNames []string // SANs of the presented certificate, as last read
	certAddrs []netip.Addr
	extra     map[string]string
}

// New watches the sources (by name: the RBAC grants are for those objects).
func New(cfg Config) (*Identity, error) {
	if cfg.Refresh <= 0 {
		cfg.Refresh = defaultRefresh
	}
	id := &Identity{cfg: cfg, extra: cfg.Extra}
	id.current.Store(&policy.APIServer{})
	byName := func(ns, name string) informers.SharedInformerFactory {
		f := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
			}))
		id.factories = append(id.factories, f)
		return f
	}
	def := byName(Namespace, Name)
	pub := byName(clusterInfoNamespace, clusterInfoName)
	watch := []cache.SharedIndexInformer{
		def.Discovery().V1().EndpointSlices().Informer(),
		def.Core().V1().Services().Informer(),
		pub.Core().V1().ConfigMaps().Informer(),
	}
	id.slices, id.services, id.clusterInfo = watch[0].GetStore(), watch[1].GetStore(), watch[2].GetStore()
	// cluster-info holds a kubeconfig; only its server is read.
	if err := watch[2].SetTransform(trimClusterInfo); err != nil {
		return nil, err
	}
	for _, inf := range watch {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { id.update() },
			UpdateFunc: func(_, _ any) { id.update() },
			DeleteFunc: func(any) { id.update() },
		}); err != nil {
			return nil, err
		}
		id.synced = append(id.synced, inf.HasSynced)
	}
	return id, nil
}

// Start runs the watches and the certificate reads until ctx ends; the
// first read of the certificate is done before it returns.
func (id *Identity) Start(ctx context.Context) {
	for _, f := range id.factories {
		f.Start(ctx.Done())
	}
	if id.cfg.REST == nil {
		id.update()
		return
	}
	id.readCertificate(ctx)
	go func() {
		t := time.NewTicker(id.cfg.Refresh)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				id.readCertificate(ctx)
			}
		}
	}()
}

// HasSynced reports whether every watch has its first list.
func (id *Identity) HasSynced() bool {
	for _, s := range id.synced {
		if !s() {
			return false
		}
	}
	return true
}

// SetExtra replaces Config.Extra.
func (id *Identity) SetExtra(extra map[string]string) {
	id.mu.Lock()
	id.extra = extra
	id.mu.Unlock()
	id.update()
}

// Current is the identity as learned now.
func (id *Identity) Current() policy.APIServer { return *id.current.Load() }

// Addresses returns every address now (sorted), for logs.
func (id *Identity) Addresses() []netip.Addr {
	return slices.SortedFunc(maps.Keys(id.Current().Addresses), netip.Addr.Compare)
}

func (id *Identity) readCertificate(ctx context.Context) {
	names, addrs, err := presentedSANs(ctx, id.cfg.REST)
	if err != nil {
		// The previous reading stays: a restarting API server must not
		// make its names approvable.
		klog.FromContext(ctx).Error(err, "Reading the API server's certificate; keeping what was learned before", "host", id.cfg.REST.Host)
	} else {
		id.mu.Lock()
		id.certNames, id.certAddrs = names, addrs
		id.mu.Unlock()
	}
	id.update()
}

func (id *Identity) update() {
	id.mu.Lock()
	changed := id.rebuild()
	id.mu.Unlock()
	if changed && id.cfg.OnChange != nil {
		id.cfg.OnChange()
	}
}

// rebuild computes the identity from every source; the caller holds mu,
// so that updates from several sources are applied in order.
func (id *Identity) rebuild() bool {
	b := builder{out: policy.APIServer{Addresses: map[netip.Addr]string{}, Endpoints: map[netip.Addr]bool{}, Names: map[string]string{}, Wildcards: map[string]string{}}}
	for _, obj := range id.slices.List() {
		if s, ok := obj.(*discoveryv1.EndpointSlice); ok && s.Namespace == Namespace && s.Name == Name {
			for _, a := range Addresses(s) {
				b.addr(a, SourceEndpoint)
				b.out.Endpoints[a] = true
			}
		}
	}
	for _, obj := range id.services.List() {
		if s, ok := obj.(*corev1.Service); ok && s.Namespace == Namespace && s.Name == Name {
			for _, ip := range append([]string{s.Spec.ClusterIP}, s.Spec.ClusterIPs...) {
				b.host(ip, SourceServiceIP)
			}
		}
	}
	if id.cfg.REST != nil {
		b.url(id.cfg.REST.Host, SourceClientHost)
	}
	for _, obj := range id.clusterInfo.List() {
		if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Namespace == clusterInfoNamespace && cm.Name == clusterInfoName {
			for _, server := range strings.Split(cm.Data[clusterInfoServerKey], "\n") {
				b.url(server, SourceClusterInfo)
			}
		}
	}
	for _, a := range id.certAddrs {
		b.addr(a, SourceCertificate)
	}
	for _, n := range id.certNames {
		b.host(n, SourceCertificate)
	}
	for v, source := range id.extra {
		b.host(v, source)
	}
	old := id.current.Swap(&b.out)
	return !equal(*old, b.out)
}

func equal(a, b policy.APIServer) bool {
	return maps.Equal(a.Addresses, b.Addresses) && maps.Equal(a.Endpoints, b.Endpoints) && maps.Equal(a.Names, b.Names) && maps.Equal(a.Wildcards, b.Wildcards)
}

// builder adds names and addresses, the first source of each kept.
type builder struct{ out policy.APIServer }

func (b *builder) addr(a netip.Addr, source string) {
	a = a.Unmap().WithZone("")
	if _, ok := b.out.Addresses[a]; !ok && a.IsValid() {
		b.out.Addresses[a] = source
	}
}

// host adds an address, a name, or a wildcard "*.<domain>": the API
// server answers on every name one label under domain, and the policy
// refuses each of them as it does its names. A "*" elsewhere in a name is
// no pattern TLS clients match: it is left out.
func (b *builder) host(h, source string) {
	h = strings.TrimSpace(h)
	if h == "" || h == corev1.ClusterIPNone {
		return
	}
	if strings.Contains(h, "*") {
		if d, ok := policy.WildcardDomain(h); ok {
			if _, seen := b.out.Wildcards[d]; !seen {
				b.out.Wildcards[d] = source
			}
		}
		return
	}
	if a, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		b.addr(a, source)
		return
	}
	if n := policy.NormalizeDNS(h); n != "" {
		if _, ok := b.out.Names[n]; !ok {
			b.out.Names[n] = source
		}
	}
}

// url adds the host of a server URL (https://host:port/path, or host:port).
func (b *builder) url(server, source string) {
	if h := URLHost(server); h != "" {
		b.host(h, source)
	}
}

// URLHost returns the host of a server URL, or "".
func URLHost(server string) string {
	server = strings.TrimSpace(server)
	if server == "" {
		return ""
	}
	if !strings.Contains(server, "://") {
		server = "https://" + server
	}
	u, err := url.Parse(server)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// presentedSANs dials the API server as cfg does (its CA and credentials)
// and returns the DNS and IP SANs of the certificate it presents.
func presentedSANs(ctx context.Context, cfg *rest.Config) ([]string, []netip.Addr, error) {
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("TLS configuration for %s: %w", cfg.Host, err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil || u.Host == "" {
		if u, err = url.Parse("https://" + cfg.Host); err != nil {
			return nil, nil, fmt.Errorf("API server host %q: %w", cfg.Host, err)
		}
	}
	if u.Scheme != "" && u.Scheme != "https" {
		return nil, nil, fmt.Errorf("API server %s does not speak TLS", cfg.Host)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "443")
	}
	if tlsCfg == nil {
		tlsCfg = &tls.Config{}
	}
	if tlsCfg.ServerName == "" {
		tlsCfg.ServerName = u.Hostname()
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := (&tls.Dialer{Config: tlsCfg}).DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("TLS handshake with the API server at %s: %w", addr, err)
	}
	defer conn.Close()
	certs := conn.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil, nil, fmt.Errorf("the API server at %s presented no certificate", addr)
	}
	var addrs []netip.Addr
	for _, ip := range certs[0].IPAddresses {
		if a, ok := netip.AddrFromSlice(ip); ok {
			addrs = append(addrs, a.Unmap())
		}
	}
	return certs[0].DNSNames, addrs, nil
}

// Addresses reads every endpoint address of one slice.
func Addresses(s *discoveryv1.EndpointSlice) []netip.Addr {
	var out []netip.Addr
	for _, ep := range s.Endpoints {
		for _, a := range ep.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

// clusterInfoServerKey holds, in the trimmed cluster-info, the server of
// its kubeconfig.
const clusterInfoServerKey = "server"

// trimClusterInfo keeps of kube-public/cluster-info only the server of its
// kubeconfig (key "kubeconfig"): the rest (the CA, JWS signatures) is not
// the approver's business.
func trimClusterInfo(obj any) (any, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return obj, nil
	}
	out := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: cm.Name, UID: cm.UID, ResourceVersion: cm.ResourceVersion}}
	if kc, err := clientcmd.Load([]byte(cm.Data["kubeconfig"])); err == nil {
		var servers []string
		for _, c := range kc.Clusters {
			servers = append(servers, c.Server)
		}
		slices.Sort(servers)
		out.Data = map[string]string{clusterInfoServerKey: strings.Join(servers, "\n")}
	}
	return out, nil
}
