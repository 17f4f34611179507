package verdict

// Reason is the condition's machine-readable reason. Each failure class has
// its own so that alerts and runbooks can key on it.
type Reason string

const (
	// Ready: every check passed (status False).
	Ready Reason = "KubeletServingCertReady"

	// The kubelet's configuration file turns serving certificate
	// bootstrap off (status True): nothing else can resolve the verdict.
	KubeletServingBootstrapOff Reason = "KubeletServingBootstrapOff"

	// Installed file (status True).
	CertificateMissing    Reason = "CertificateMissing"
	CertificateUnreadable Reason = "CertificateUnreadable"
	CertificateMalformed  Reason = "CertificateMalformed"

	// Certificate content (status True).
	CertificateInvalid          Reason = "CertificateInvalid"
	CertificateNotYetValid      Reason = "CertificateNotYetValid"
	CertificateExpired          Reason = "CertificateExpired"
	CertificateUntrusted        Reason = "CertificateUntrusted"
	CertificateIdentityMismatch Reason = "CertificateIdentityMismatch"
	ClockSkew                   Reason = "ClockSkew"

	// CSR (status True).
	CSRNotFound  Reason = "CSRNotFound"
	CSRPending   Reason = "CSRPending"
	CSRDenied    Reason = "CSRDenied"
	CSRFailed    Reason = "CSRFailed"
	CSRNotIssued Reason = "CSRNotIssued"

	// Kubelet endpoint (status True).
	EndpointUnreachable          Reason = "EndpointUnreachable"
	EndpointNoCertificate        Reason = "EndpointNoCertificate"
	EndpointNotTLS               Reason = "EndpointNotTLS"
	EndpointHandshakeFailed      Reason = "EndpointHandshakeFailed"
	EndpointCertificateUntrusted Reason = "EndpointCertificateUntrusted"
	EndpointCertificateMismatch  Reason = "EndpointCertificateMismatch"

	// The API server's own path to the kubelet (status True): kubectl
	// logs, exec and port-forward fail though the node serves.
	APIServerCannotVerifyKubelet Reason = "APIServerCannotVerifyKubelet"
	APIServerCannotReachKubelet  Reason = "APIServerCannotReachKubelet"

	// The agent itself could not check (status Unknown).
	CAUnavailable   Reason = "CAUnavailable"
	CSRLookupFailed Reason = "CSRLookupFailed"
	NotChecked      Reason = "NotChecked"
	// CheckStalled: no check completed for too long (the agent's
	// watchdog); the last verdict no longer stands.
	CheckStalled Reason = "CheckStalled"
	// APIServerProofUnavailable: the log request through the API server
	// told nothing about its path to the kubelet (RBAC, an API error).
	APIServerProofUnavailable Reason = "APIServerProofUnavailable"
)

// FindingAPIServerVerifiesNoKubelet is the cluster finding an agent
// records as a Warning Node event (reason) when the API server read its
// pod's log over a kubelet certificate the CA does not verify: the API
// server verifies no kubelet. It is no condition reason: the node stays
// not ready by its own checks.
const FindingAPIServerVerifiesNoKubelet = "APIServerVerifiesNoKubelet"

// AllReasons lists every reason, for metrics that export one series per reason.
var AllReasons = []Reason{
	Ready, KubeletServingBootstrapOff,
	CertificateMissing, CertificateUnreadable, CertificateMalformed,
	CertificateInvalid, CertificateNotYetValid, CertificateExpired, CertificateUntrusted, CertificateIdentityMismatch, ClockSkew,
	CSRNotFound, CSRPending, CSRDenied, CSRFailed, CSRNotIssued,
	EndpointUnreachable, EndpointNoCertificate, EndpointNotTLS, EndpointHandshakeFailed, EndpointCertificateUntrusted, EndpointCertificateMismatch,
	APIServerCannotVerifyKubelet, APIServerCannotReachKubelet,
	CAUnavailable, CSRLookupFailed, NotChecked, CheckStalled, APIServerProofUnavailable,
}

// Transient reports whether r can be a passing state of a healthy kubelet
// rotation: the symlink briefly absent, a half-written pair, or the kubelet
// still serving its previous certificate a moment after the new file landed.
// Such a verdict must persist for a settle period before it is published.
func (r Reason) Transient() bool {
	switch r {
	case CertificateMissing, CertificateMalformed, EndpointCertificateMismatch:
		return true
	}
	return false
}
