//go:build !nodeonly && nogotemplate

package main

import (
	"errors"

	"k8s.io/cli-runtime/pkg/printers"
)

// templateFlavour says, in version output, that -o go-template is not in
// this build.
const templateFlavour = ", no go-template"

// goTemplateOutputs: none in this build (help and errors leave them out).
const goTemplateOutputs = ""

// errNoGoTemplate: the image's certready (the approver, and the CLI inside
// its pods) is built without text/template, which would keep 13 MiB of
// code resident in every approver replica (docs/benchmarks.md).
var errNoGoTemplate = errors.New("go-template is not in this build (the container image's, built -tags nogotemplate to keep the approver small): use -o jsonpath=... (the same data), or run the kubectl-certready release binary, which has it")

func goTemplatePrinter([]byte) (printers.ResourcePrinter, error) { return nil, errNoGoTemplate }
