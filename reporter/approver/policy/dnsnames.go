package policy

import (
	"fmt"
	"strings"
)

// Bounds of a host name (RFC 1035 2.3.4, RFC 1123 2.1), without the root's
// trailing dot.
const (
	maxNameLength  = 253
	maxLabelLength = 63
)

// HostnameProblem says why name (a trailing dot allowed) is not a valid
// host name, or "": each label 1 to 63 letters, digits and hyphens, no
// hyphen first or last, 253 characters at most. It reads name in place,
// with no allocation, since the policy asks it of every DNS SAN.
func HostnameProblem(name string) string {
	n := strings.TrimSuffix(name, ".")
	switch {
	case n == "":
		return "empty"
	case len(n) > maxNameLength:
		return fmt.Sprintf("%d characters long, at most %d", len(n), maxNameLength)
	}
	for rest, more := n, true; more; {
		var label string
		label, rest, more = strings.Cut(rest, ".")
		switch {
		case label == "":
			return "an empty label"
		case len(label) > maxLabelLength:
			return fmt.Sprintf("a label of %d characters, at most %d", len(label), maxLabelLength)
		case label[0] == '-' || label[len(label)-1] == '-':
			return "a label that starts or ends with a hyphen"
		}
		for i := 0; i < len(label); i++ {
			switch c := label[i]; {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
			case c == '_':
				return "an underscore (no host name has one)"
			case c < 0x20 || c == 0x7f:
				return "a control character"
			default:
				return fmt.Sprintf("the character %q (a host name has letters, digits, hyphens and dots)", rune(c))
			}
		}
	}
	return ""
}

// parentDomain is what follows the first label of a normalized name
// ("a.b.c": "b.c"), or "" for a name of one label: the domain a
// single-label wildcard "*.<parent>" must name to cover it.
func parentDomain(n string) string {
	i := strings.IndexByte(n, '.')
	if i <= 0 {
		return ""
	}
	return n[i+1:]
}

// wildcardCovers says whether the single-label wildcard pattern ("*.b.c",
// normalized) covers the normalized name n, as TLS clients match it
// (RFC 6125 6.4.3, crypto/x509): "a.b.c" yes; "b.c" and "x.a.b.c" no.
func wildcardCovers(pattern, n string) bool {
	domain, ok := strings.CutPrefix(pattern, "*.")
	return ok && domain != "" && parentDomain(n) == domain
}

// WildcardDomain returns, for a single-label wildcard pattern "*.<domain>"
// (case and the root's trailing dot ignored), the normalized domain whose
// every direct subdomain it covers; ok is false for anything else (a name,
// or a "*" elsewhere, which TLS clients do not match).
func WildcardDomain(pattern string) (domain string, ok bool) {
	p := NormalizeDNS(strings.TrimSpace(pattern))
	domain, ok = strings.CutPrefix(p, "*.")
	if !ok || HostnameProblem(domain) != "" {
		return "", false
	}
	return domain, true
}

// ParseDenyName validates one value of --apiserver-names and returns it
// normalized: a host name, or a pattern "*.<domain>" whose domain has at
// least two labels (a pattern over a top-level domain would refuse every
// name in it).
func ParseDenyName(s string) (string, error) {
	v := NormalizeDNS(strings.TrimSpace(s))
	if domain, ok := strings.CutPrefix(v, "*."); ok {
		if why := HostnameProblem(domain); why != "" {
			return "", fmt.Errorf("%q: the domain after \"*.\" has %s; want a pattern such as *.api.example.com", s, why)
		}
		if !strings.Contains(domain, ".") {
			return "", fmt.Errorf("%q: a pattern needs a domain of at least two labels after \"*.\" (*.api.example.com, not *.com)", s)
		}
		return v, nil
	}
	if strings.Contains(v, "*") {
		return "", fmt.Errorf("%q: a wildcard is only \"*.\" followed by a domain of at least two labels (*.api.example.com), as TLS clients match it", s)
	}
	if why := HostnameProblem(v); why != "" {
		return "", fmt.Errorf("%q: not a host name: %s; want a name such as api.example.com or a pattern such as *.api.example.com", s, why)
	}
	return v, nil
}

// ParseDNSSuffix validates one value of --allowed-dns-suffixes (a domain,
// its leading dot optional) and returns it normalized, without the dot.
func ParseDNSSuffix(s string) (string, error) {
	v := strings.TrimPrefix(NormalizeDNS(strings.TrimSpace(s)), ".")
	if why := HostnameProblem(v); why != "" {
		return "", fmt.Errorf("%q: not a domain: %s; want a domain such as nodes.example.com (names under it pass)", s, why)
	}
	return v, nil
}

// underSuffix says whether the normalized name n is a subdomain of one of
// suffixes (normalized, no leading dot), and which.
func underSuffix(n string, suffixes []string) (string, bool) {
	for _, s := range suffixes {
		s = strings.TrimPrefix(NormalizeDNS(s), ".")
		if len(n) > len(s) && strings.HasSuffix(n, s) && n[len(n)-len(s)-1] == '.' {
			return s, true
		}
	}
	return "", false
}

// clusterName says why the normalized name n is a name the cluster's DNS
// gives a Service or a Pod, or "" (names with ".svc" in them are refused
// before, as SANDenied):
//   - a label pod after the first: <a-b-c-d>.<namespace>.pod.…;
//   - two labels <a>.<b>: the short form <service>.<namespace>, which a
//     pod's DNS search path (<namespace>.svc.<cluster domain>,
//     svc.<cluster domain>, …) resolves to the Service b/a. Whether b is a
//     namespace is not asked: one created after the certificate was issued
//     would turn it into that Service's for the rest of its validity. A
//     domain the operator lists in suffixes (--allowed-dns-suffixes) is a
//     host domain by the operator's word, and passes.
func clusterName(n string, suffixes []string) string {
	labels := 0
	for rest, more := n, true; more; {
		var label string
		label, rest, more = strings.Cut(rest, ".")
		if labels++; labels == 1 {
			continue
		}
		if label == "pod" {
			return "a Pod's DNS name (<a-b-c-d>.<namespace>.pod.…)"
		}
	}
	if labels == 2 {
		if _, ok := underSuffix(n, suffixes); !ok {
			return fmt.Sprintf("of two labels, the short form <service>.<namespace> of a Service, which pods resolve through their DNS search path (to %s.svc.<cluster domain>); a host name of two labels passes when --allowed-dns-suffixes lists its domain %q", n, n[strings.IndexByte(n, '.')+1:])
		}
	}
	return ""
}
