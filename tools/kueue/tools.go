//go:build tools

// Package tools pins the Kueue manager that scripts/kueue-build.sh builds from this module; its CRDs, webhook
// manifests and visibility APIService are read from the same module at setup (scripts/k8s-setup.sh).
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
