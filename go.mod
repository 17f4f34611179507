module github.com/certready/certready

go 1.26.8

require (
	github.com/fsnotify/fsnotify v1.9.0
	k8s.io/klog/v2 v2.140.0
)

require (
	github.com/go-logr/logr v1.4.3 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
