//go:build !nodeonly

package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"k8s.io/client-go/util/jsonpath"
)

// sortBy orders rows as kubectl's --sort-by does: by the value a JSONPath
// expression (".notAfter", "{.reason}") finds in each row's json, numbers
// by value, RFC 3339 times in time order whatever their zone, everything
// else by its text; rows without the field come last, ties keep their
// order.
func sortBy[T any](rows []T, expr string) error {
	if expr == "" {
		return nil
	}
	tmpl := expr
	if !strings.HasPrefix(tmpl, "{") {
		tmpl = "{" + tmpl + "}"
	}
	jp := jsonpath.New("sort-by").AllowMissingKeys(true)
	if err := jp.Parse(tmpl); err != nil {
		return fmt.Errorf("--sort-by=%s: %w", expr, err)
	}
	type keyed struct {
		found bool
		num   *float64
		text  string
	}
	keys := make([]keyed, len(rows))
	for i, r := range rows {
		data, err := json.Marshal(r)
		if err != nil {
			return err
		}
		var doc any
		if err := json.Unmarshal(data, &doc); err != nil {
			return err
		}
		results, err := jp.FindResults(doc)
		if err != nil {
			return fmt.Errorf("--sort-by=%s: %w", expr, err)
		}
		if len(results) == 0 || len(results[0]) == 0 {
			continue
		}
		if len(results) > 1 || len(results[0]) > 1 {
			return fmt.Errorf("--sort-by=%s: finds more than one value in a row; name one field, e.g. --sort-by=.notAfter", expr)
		}
		v := results[0][0]
		for v.Kind() == reflect.Interface && !v.IsNil() {
			v = v.Elem()
		}
		k := keyed{found: true}
		switch v.Kind() {
		case reflect.Float64:
			f := v.Float()
			k.num = &f
		case reflect.Map, reflect.Slice:
			return fmt.Errorf("--sort-by=%s: finds an object or a list, not a value", expr)
		default:
			k.text = fmt.Sprint(v.Interface())
			// Times compare as times: the document writes them with the
			// zone they were read in, and offsets differ across DST.
			if t, err := time.Parse(time.RFC3339Nano, k.text); err == nil {
				k.text = t.UTC().Format("2006-01-02T15:04:05.000000000Z")
			}
		}
		keys[i] = k
	}
	idx := make([]int, len(rows))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		ka, kb := keys[idx[a]], keys[idx[b]]
		switch {
		case ka.found != kb.found:
			return ka.found
		case ka.num != nil && kb.num != nil:
			return *ka.num < *kb.num
		}
		return ka.text < kb.text
	})
	sorted := make([]T, len(rows))
	for i, j := range idx {
		sorted[i] = rows[j]
	}
	copy(rows, sorted)
	return nil
}
