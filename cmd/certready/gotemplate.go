//go:build !nodeonly && !nogotemplate

package main

import "k8s.io/cli-runtime/pkg/printers"

// templateFlavour says, in version output, whether -o go-template is in
// this build.
const templateFlavour = ""

// goTemplateOutputs are the go-template outputs, for help and errors.
const goTemplateOutputs = "go-template=<template>, go-template-file=<file>, "

// goTemplatePrinter is kubectl's go-template printer, missing keys allowed
// (kubectl's default). It links text/template, whose method lookups by
// name keep every exported method of every reachable type in the binary:
// the image's build leaves it out (-tags nogotemplate, gotemplate_image.go).
func goTemplatePrinter(tmpl []byte) (printers.ResourcePrinter, error) {
	gt, err := printers.NewGoTemplatePrinter(tmpl)
	if err != nil {
		return nil, err
	}
	gt.AllowMissingKeys(true)
	return gt, nil
}
