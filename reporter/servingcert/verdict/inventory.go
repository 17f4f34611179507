package verdict

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/certready/certready/reporter/servingcert/evidence"
)

// driftListMax bounds each list a drift names: an inventory or a Node
// with many addresses must not grow the condition past what a status patch
// carries.
const driftListMax = 4

// Drift says how the Node's reported IP addresses differ from what the
// inventory records for it, for the condition message, or "" when they
// agree or there is nothing to compare (no inventory, not listed, not
// readable: inventoryNote says so). Each address is named once, at most
// driftListMax of each kind.
func Drift(in evidence.Evidence) string {
	inv := in.Inventory
	if inv == nil || inv.Err != nil || !inv.Listed {
		return ""
	}
	recorded := map[netip.Addr]bool{}
	for _, r := range inv.IPs {
		recorded[r.Unmap()] = true
	}
	reported := map[netip.Addr]bool{}
	var extra []string
	for _, a := range in.Node.Reported {
		ip := a.IP.Unmap()
		if reported[ip] {
			continue
		}
		reported[ip] = true
		if !recorded[ip] {
			extra = append(extra, fmt.Sprintf("%s (%s)", ip, a.Type))
		}
	}
	var missing []string
	seen := map[netip.Addr]bool{}
	for _, r := range inv.IPs {
		ip := r.Unmap()
		if !reported[ip] && !seen[ip] {
			missing = append(missing, ip.String())
		}
		seen[ip] = true
	}
	var parts []string
	if len(extra) > 0 {
		parts = append(parts, fmt.Sprintf("the Node reports %s, which it does not record", bounded(extra)))
	}
	if len(missing) > 0 {
		parts = append(parts, fmt.Sprintf("it records %s, which the Node does not report", bounded(missing)))
	}
	if len(parts) == 0 {
		return ""
	}
	msg := "the Node's addresses drifted from the inventory (" + inv.Source + "): " + strings.Join(parts, "; ")
	if ip, ok := inv.DialIP(in.Node); ok {
		msg += fmt.Sprintf("; the agent dials the inventory's %s", ip)
	}
	return msg
}

// bounded joins at most driftListMax items, naming how many it left out.
func bounded(items []string) string {
	if len(items) <= driftListMax {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:driftListMax], ", "), len(items)-driftListMax)
}

// inventoryNote is what a message says of an inventory that could not be
// used for this node, or "".
func inventoryNote(in evidence.Evidence) string {
	inv := in.Inventory
	switch {
	case inv == nil:
		return ""
	case inv.Err != nil:
		return fmt.Sprintf("the inventory (%s) cannot be read, so the Node's addresses were used: %v", inv.Source, inv.Err)
	case !inv.Listed:
		return fmt.Sprintf("the inventory (%s) does not list this node, so the Node's addresses were used", inv.Source)
	}
	return ""
}

// inventoryNotes is "; " and what Drift and inventoryNote say, or "".
func inventoryNotes(in evidence.Evidence) string {
	var out string
	for _, n := range []string{Drift(in), inventoryNote(in)} {
		if n != "" {
			out += "; " + n
		}
	}
	return out
}
