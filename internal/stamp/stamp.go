// Package stamp is the one format of times in condition messages, events
// and CLI output, so that every part writes a time the same way.
package stamp

import "time"

// Format writes t as condition messages and events write times: RFC 3339
// in UTC.
func Format(t time.Time) string { return t.UTC().Format(time.RFC3339) }
