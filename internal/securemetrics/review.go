// Package securemetrics serves the metrics endpoints only to callers the
// cluster vouches for, as kube-rbac-proxy and controller-runtime's secure
// metrics do: over TLS, the caller's bearer token checked by the API server
// (TokenReview) and its right to the path asked of it (SubjectAccessReview
// on the non-resource URL, verb get). A scraper therefore needs a
// ServiceAccount token and a ClusterRole with nonResourceURLs ["/metrics"].
//
// The port is reachable by anything on the node's network, and every token
// costs the API server two reviews: answers are cached by the token's hash
// (an allowed one is answered from the cache while it is reviewed again),
// reviews run on their own rate-limited client (never the agent's, whose
// budget is its node's condition), and at most a few run at once, one of
// them kept for tokens allowed before; a caller beyond that is told to come
// back (429) without an API request.
package securemetrics

import (
	"context"
	"fmt"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Reviewer asks the API server who a token belongs to and what it may do.
type Reviewer interface {
	// Authenticate returns the token's user, or nil when the API server
	// does not accept the token.
	Authenticate(ctx context.Context, token string) (*authnv1.UserInfo, error)
	// Authorize tells whether user may verb the non-resource path, and why
	// not.
	Authorize(ctx context.Context, user *authnv1.UserInfo, verb, path string) (allowed bool, reason string, err error)
}

// scheme holds the two review types only (the node build links no
// clientset).
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(authnv1.SchemeGroupVersion, &authnv1.TokenReview{})
	metav1.AddToGroupVersion(s, authnv1.SchemeGroupVersion)
	s.AddKnownTypes(authzv1.SchemeGroupVersion, &authzv1.SubjectAccessReview{})
	metav1.AddToGroupVersion(s, authzv1.SchemeGroupVersion)
	return s
}()

// Review QPS: a scraper's answer is cached for the cache's TTL, so a few
// scrapers need a request now and then; more than this is someone trying
// tokens, and waits on this client's limiter, not the component's.
const (
	reviewQPS   = 5
	reviewBurst = 10
)

type apiReviewer struct {
	authn, authz rest.Interface
}

// NewReviewer reviews through the API server of cfg, on clients of their
// own (one rate limiter for both, not the component's; JSON: the review types have no protobuf in this
// scheme).
func NewReviewer(cfg *rest.Config) (Reviewer, error) {
	limiter := flowcontrol.NewTokenBucketRateLimiter(reviewQPS, reviewBurst)
	authn, err := restFor(cfg, authnv1.SchemeGroupVersion, limiter)
	if err != nil {
		return nil, err
	}
	authz, err := restFor(cfg, authzv1.SchemeGroupVersion, limiter)
	if err != nil {
		return nil, err
	}
	return &apiReviewer{authn: authn, authz: authz}, nil
}

func restFor(cfg *rest.Config, gv schema.GroupVersion, limiter flowcontrol.RateLimiter) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	c.RateLimiter = limiter
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}

func (r *apiReviewer) Authenticate(ctx context.Context, token string) (*authnv1.UserInfo, error) {
	in := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}
	out := &authnv1.TokenReview{}
	if err := r.authn.Post().Resource("tokenreviews").Body(in).Do(ctx).Into(out); err != nil {
		return nil, fmt.Errorf("TokenReview: %w", err)
	}
	if !out.Status.Authenticated {
		return nil, nil
	}
	return &out.Status.User, nil
}

func (r *apiReviewer) Authorize(ctx context.Context, user *authnv1.UserInfo, verb, path string) (bool, string, error) {
	extra := make(map[string]authzv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	in := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb},
	}}
	out := &authzv1.SubjectAccessReview{}
	if err := r.authz.Post().Resource("subjectaccessreviews").Body(in).Do(ctx).Into(out); err != nil {
		return false, "", fmt.Errorf("SubjectAccessReview: %w", err)
	}
	return out.Status.Allowed && !out.Status.Denied, out.Status.Reason, nil
}
