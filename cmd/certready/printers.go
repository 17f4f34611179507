//go:build !nodeonly

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/util/jsonpath"
)

// docOutputs names the outputs every list command shares, for errors.
const docOutputs = "json, yaml, jsonpath=<template>, jsonpath-file=<file>, " + goTemplateOutputs + "custom-columns=<spec> or custom-columns-file=<file>"

// docPrinter writes a list command's document in one of kubectl's outputs.
type docPrinter func(w io.Writer, doc any) error

// newDocPrinter is the printer for output, the same for every list command:
// json and yaml of the document, jsonpath and go-template (inline or from a
// file) over it, and custom-columns (inline or from a file) over its rows,
// the list under rowsKey, one line each. ok is false for any other output
// (the command's own: a table, wide, name). A template or spec that does
// not parse, or a file that cannot be read, is an error naming the output,
// returned before the cluster is read.
func newDocPrinter(output string, noHeaders bool, rowsKey string) (p docPrinter, ok bool, err error) {
	switch output {
	case "json", "yaml":
		return func(w io.Writer, doc any) error { return printDocument(w, output, doc) }, true, nil
	}
	if tp, ok, err := templatePrinter(output); ok {
		if err != nil {
			return nil, true, err
		}
		return func(w io.Writer, doc any) error {
			m, err := asMap(doc)
			if err != nil {
				return err
			}
			return tp.PrintObj(&unstructured.Unstructured{Object: m}, w)
		}, true, nil
	}
	kind, arg, _ := strings.Cut(output, "=")
	var spec string
	switch kind {
	case "custom-columns":
		spec = arg
	case "custom-columns-file":
		data, err := os.ReadFile(arg)
		if err != nil {
			return nil, true, fmt.Errorf("--output=%s: %w", output, err)
		}
		if spec, err = columnsFromTemplate(string(data)); err != nil {
			return nil, true, fmt.Errorf("--output=%s: %w", output, err)
		}
	default:
		return nil, false, nil
	}
	cols, err := parseColumns(spec)
	if err != nil {
		return nil, true, fmt.Errorf("--output=%s: %w", output, err)
	}
	return func(w io.Writer, doc any) error {
		m, err := asMap(doc)
		if err != nil {
			return err
		}
		rows, _ := m[rowsKey].([]any)
		return printColumns(w, cols, rows, noHeaders)
	}, true, nil
}

// column is one of custom-columns: a header and the JSONPath of its cells.
// kubectl's own printer lives in k8s.io/kubectl/pkg/cmd/get, which would
// link the whole get command into this binary; this one keeps its spec
// (HEADER:.path,... or a file of a header line and a path line), its
// JSONPath (client-go's) and its cells (values joined by ",", <none>
// where a row has none).
type column struct {
	header string
	path   *jsonpath.JSONPath
}

func parseColumns(spec string) ([]column, error) {
	if spec == "" {
		return nil, fmt.Errorf("custom-columns format specified but no custom columns given")
	}
	var cols []column
	for _, part := range strings.Split(spec, ",") {
		header, expr, ok := strings.Cut(part, ":")
		if !ok || header == "" || expr == "" {
			return nil, fmt.Errorf("unexpected custom-columns spec: %s, expected <header>:<json-path-expr>", part)
		}
		jp := jsonpath.New(header).AllowMissingKeys(true)
		if !strings.HasPrefix(expr, "{") {
			expr = "{" + expr + "}"
		}
		if err := jp.Parse(expr); err != nil {
			return nil, fmt.Errorf("column %s: %w", header, err)
		}
		cols = append(cols, column{header: header, path: jp})
	}
	return cols, nil
}

// columnsFromTemplate reads a custom-columns file: a line of headers and a
// line of JSONPaths, whitespace-separated, as kubectl's.
func columnsFromTemplate(text string) (string, error) {
	var lines [][]string
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			lines = append(lines, f)
		}
	}
	if len(lines) != 2 {
		return "", fmt.Errorf("want two lines, the headers and their JSONPaths; got %d", len(lines))
	}
	if len(lines[0]) != len(lines[1]) {
		return "", fmt.Errorf("%d headers but %d JSONPaths", len(lines[0]), len(lines[1]))
	}
	parts := make([]string, len(lines[0]))
	for i := range parts {
		parts[i] = lines[0][i] + ":" + lines[1][i]
	}
	return strings.Join(parts, ","), nil
}

func printColumns(w io.Writer, cols []column, rows []any, noHeaders bool) error {
	tw := newTable(w)
	if !noHeaders {
		headers := make([]string, len(cols))
		for i, c := range cols {
			headers[i] = c.header
		}
		row(tw, headers...)
	}
	for _, r := range rows {
		cells := make([]string, len(cols))
		for i, c := range cols {
			results, err := c.path.FindResults(r)
			if err != nil {
				return fmt.Errorf("column %s: %w", c.header, err)
			}
			var vals []string
			for _, rs := range results {
				for _, v := range rs {
					vals = append(vals, fmt.Sprint(v.Interface()))
				}
			}
			cells[i] = "<none>"
			if len(vals) > 0 {
				cells[i] = strings.Join(vals, ",")
			}
		}
		row(tw, cells...)
	}
	return tw.Flush()
}

// asMap is doc as its json reads, for the printers that walk it.
func asMap(doc any) (map[string]any, error) {
	data, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	return m, json.Unmarshal(data, &m)
}

// templatePrinter is cli-runtime's printer for kubectl's template outputs
// (jsonpath=, jsonpath-file=, go-template=, go-template-file=); ok is
// false for any other output. A template that does not parse, or a file
// that cannot be read, is an error naming the output.
func templatePrinter(output string) (p printers.ResourcePrinter, ok bool, err error) {
	kind, arg, _ := strings.Cut(output, "=")
	var tmpl []byte
	switch kind {
	case "jsonpath", "go-template":
		tmpl = []byte(arg)
	case "jsonpath-file", "go-template-file":
		if tmpl, err = os.ReadFile(arg); err != nil {
			return nil, true, fmt.Errorf("--output=%s: %w", output, err)
		}
	default:
		return nil, false, nil
	}
	// As kubectl's default --allow-missing-template-keys: the document
	// leaves out empty fields (a ready node has no problem), and a filter
	// over one must skip such rows, not fail.
	if strings.HasPrefix(kind, "jsonpath") {
		var jp *printers.JSONPathPrinter
		if jp, err = printers.NewJSONPathPrinter(string(tmpl)); err == nil {
			jp.AllowMissingKeys(true)
			p = jp
		}
	} else {
		p, err = goTemplatePrinter(tmpl)
	}
	if err != nil {
		return nil, true, fmt.Errorf("--output=%s: %w", output, err)
	}
	return p, true, nil
}

// newTable is kubectl's table writer (its column padding), for the list
// commands' own tables.
func newTable(w io.Writer) interface {
	io.Writer
	Flush() error
} {
	return printers.GetNewTabWriter(w)
}
