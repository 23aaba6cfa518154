package desired

import (
	"fmt"
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// portsKey is a canonical text of a port set, for grouping.
func portsKey(ports []discoveryv1.EndpointPort) string {
	parts := make([]string, 0, len(ports))
	for _, p := range ports {
		parts = append(parts, fmt.Sprintf("%s/%d/%s/%s", ptr.Deref(p.Name, ""), ptr.Deref(p.Port, 0),
			ptr.Deref(p.Protocol, ""), ptr.Deref(p.AppProtocol, "")))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}
