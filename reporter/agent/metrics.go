package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/certready/certready/reporter/agent/renewal"
	"github.com/certready/certready/reporter/servingcert/apipath"
	"github.com/certready/certready/reporter/servingcert/verdict"
)

// metrics are the agent's Prometheus series. An agent reports one node, so
// no series carries a node label (the scrape target adds it), and none ever
// carries key material.
type metrics struct {
	ready          prometheus.Gauge
	reason         *prometheus.GaugeVec
	notAfter       prometheus.Gauge
	observation    prometheus.Gauge
	checkPassed    *prometheus.GaugeVec
	checkDuration  *prometheus.HistogramVec
	transitions    *prometheus.CounterVec
	lastSuccess    prometheus.Gauge
	writes         *prometheus.CounterVec
	events         *prometheus.CounterVec
	foreign        prometheus.Counter
	stalled        prometheus.Gauge
	clockSkew      prometheus.Gauge
	rotations      prometheus.Counter
	caNotAfter     prometheus.Gauge
	renewalStuck   *prometheus.GaugeVec
	clientNotAfter prometheus.Gauge
	expiryWindow   *prometheus.GaugeVec
	apiProofs      *prometheus.CounterVec
	unverified     prometheus.Gauge
	unverifiedAsks *prometheus.CounterVec
	kubeletConfig  *prometheus.GaugeVec
	drift          prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, cfg Config) *metrics {
	m := &metrics{
		apiProofs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "certready_apiserver_path_proofs_total",
			Help: "Log requests through the API server that proved (proven) or failed to prove its connection to this node's kubelet: cannot-verify (its TLS to the kubelet fails), cannot-reach (it cannot connect), unavailable (the request told nothing: RBAC, an API error).",
		}, []string{"outcome"}),
		unverified: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "certready_apiserver_verifies_no_kubelet",
			Help: "1 when the API server read this pod's log over a kubelet certificate the CA does not verify: it verifies no kubelet (kube-apiserver without --kubelet-certificate-authority), a finding about the cluster; else 0.",
		}),
		unverifiedAsks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "certready_apiserver_unverified_asks_total",
			Help: "Log requests through the API server while the kubelet presented a certificate the CA does not verify: proven (the API server verifies no kubelet), cannot-verify (it refused, as it should), cannot-reach, unavailable.",
		}, []string{"outcome"}),
		drift: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "certready_node_address_drift",
			Help: "1 when the Node's IP addresses differ from what the --inventory records for it (the NodeAddressDrift event names how), else 0; no series without --inventory.",
		}),
		kubeletConfig: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "certready_kubelet_certificate_rotation",
			Help: "What the kubelet's configuration file says about certificate rotation: certificate=serving (serverTLSBootstrap) or client (rotateCertificates), 1 on, 0 off; no series while the file is not read.",
		}, []string{"certificate"}),
		expiryWindow: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "certready_expiry_window_seconds",
			Help: "The agent's expiry windows, in seconds, that the expiry alerts compare with: window=warning (--expiry-warning) and critical (--expiry-critical) for the kubelet's serving and client certificates, ca-warning (--ca-expiry-warning) for the cluster CA.",
		}, []string{"window"}),
		caNotAfter: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "certready_ca_not_after_timestamp_seconds",
			Help: "NotAfter of the root CA the proven serving certificate chains to, as Unix seconds (0 until a certificate was proven ready).",
		}),
		clientNotAfter: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "certready_kubelet_client_cert_not_after_timestamp_seconds",
			Help: "NotAfter of the kubelet's client certificate (<pki-dir>/kubelet-client-current.pem, its identity towards the API server), as Unix seconds (0 when there is none to read: a kubelet with a static client certificate).",
		}),
		renewalStuck: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "certready_renewal_stuck",
			Help: "1 for what holds up the renewal of a serving certificate that still works, once it is past the kubelet's latest rotation point (90% of its lifetime plus a grace); 0 for every other reason, and all 0 while the renewal is not stuck or the certificate is not proven ready.",
		}, []string{"reason"}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "certready_kubelet_serving_cert_ready",
			Help: "1 when the last published condition says the kubelet serving certificate is ready (status False), else 0.",
		}),
		reason: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "certready_condition_reason",
			Help: "1 for the reason of the last published condition, 0 for every other reason.",
		}, []string{"reason"}),
		notAfter: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "certready_certificate_not_after_timestamp_seconds",
			Help: "NotAfter of the installed kubelet serving certificate, as Unix seconds (0 when none is installed).",
		}),
		observation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "certready_observation_available",
			Help: "1 when the installed certificate could be read at the last check, else 0.",
		}),
		checkPassed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "certready_check_passed",
			Help: "Result of each check at the last evaluation: 1 passed, 0 failed; absent when the check did not run.",
		}, []string{"check"}),
		checkDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "certready_check_duration_seconds",
			Help:    "Time spent observing each check's evidence.",
			Buckets: []float64{.0005, .001, .005, .01, .05, .1, .5, 1, 5},
		}, []string{"check"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "certready_condition_transitions_total",
			Help: "Condition transitions published, by the new reason.",
		}, []string{"reason"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "certready_last_successful_check_timestamp_seconds",
			Help: "Unix time of the last check that reached a verdict (status True or False) and was published.",
		}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "certready_condition_writes_total",
			Help: "Condition writes by outcome (Transitioned, Written, Skipped, Error).",
		}, []string{"outcome"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "certready_watch_events_total",
			Help: "Informer events received, by resource (nodes: its own Node only; csrs: its own labelled CSRs only). Flat in cluster size by design.",
		}, []string{"resource"}),
		foreign: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "certready_foreign_csrs_total",
			Help: "CSR events ignored because the CSR is not a kubelet-serving one of this node (another signer, or a label another requester set): the API server's selectors should keep these out.",
		}),
		stalled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "certready_check_stalled",
			Help: "1 while no check has completed for --check-stalled-after (the watchdog then publishes Unknown/CheckStalled), else 0.",
		}),
		clockSkew: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "certready_clock_skew_seconds",
			Help: "The node's clock minus the API server's (the Date of its responses), at the last check; negative: the node is behind.",
		}),
		rotations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "certready_certificate_rotations_total",
			Help: "Serving certificates proven ready that replaced another this process had proven (the first one after a start is not counted).",
		}),
	}
	reg.MustRegister(m.ready, m.reason, m.notAfter, m.observation, m.checkPassed, m.checkDuration, m.transitions, m.lastSuccess, m.writes, m.events,
		m.foreign, m.stalled, m.clockSkew, m.rotations, m.caNotAfter, m.renewalStuck, m.clientNotAfter, m.expiryWindow, m.apiProofs,
		m.unverified, m.unverifiedAsks, m.kubeletConfig)
	if cfg.Inventory != "" && cfg.Inventory != "node" {
		reg.MustRegister(m.drift)
	}
	for _, o := range apipath.Outcomes {
		m.apiProofs.WithLabelValues(string(o))
	}
	oneHot(m.reason, verdict.AllReasons, "")
	m.setRenewal(renewal.NotDue)
	m.expiryWindow.WithLabelValues("warning").Set(cfg.ExpiryWarning.Seconds())
	m.expiryWindow.WithLabelValues("critical").Set(cfg.ExpiryCritical.Seconds())
	m.expiryWindow.WithLabelValues("ca-warning").Set(cfg.CAExpiryWarning.Seconds())
	return m
}

// setRenewal sets certready_renewal_stuck: 1 for reason, 0 for the others.
func (m *metrics) setRenewal(reason renewal.Reason) {
	oneHot(m.renewalStuck, renewal.Reasons, reason)
}

// oneHot sets vec to 1 for the label value current and to 0 for every
// other value of all (all 0 when current is not among them).
func oneHot[T ~string](vec *prometheus.GaugeVec, all []T, current T) {
	for _, v := range all {
		val := 0.0
		if v == current {
			val = 1
		}
		vec.WithLabelValues(string(v)).Set(val)
	}
}

func (m *metrics) observe(c verdict.Step, d time.Duration) {
	m.checkDuration.WithLabelValues(string(c)).Observe(d.Seconds())
}

func (m *metrics) evaluated(v verdict.Verdict) {
	ran := map[verdict.Step]bool{}
	for _, r := range v.Results {
		ran[r.Step] = true
		if r.Passed {
			m.checkPassed.WithLabelValues(string(r.Step)).Set(1)
		} else {
			m.checkPassed.WithLabelValues(string(r.Step)).Set(0)
		}
	}
	for _, c := range verdict.Steps {
		if !ran[c] {
			m.checkPassed.DeleteLabelValues(string(c))
		}
	}
}

func (m *metrics) published(v verdict.Verdict, now time.Time, transitioned bool) {
	oneHot(m.reason, verdict.AllReasons, v.Reason)
	if v.Ready() {
		m.ready.Set(1)
	} else {
		m.ready.Set(0)
	}
	if transitioned {
		m.transitions.WithLabelValues(string(v.Reason)).Inc()
	}
	if v.Status != corev1.ConditionUnknown {
		m.lastSuccess.Set(float64(now.Unix()))
	}
}

// setNotAfter records the installed certificate's NotAfter (Unix seconds, 0
// for none).
func (m *metrics) setNotAfter(v float64) {
	m.notAfter.Set(v)
}
