//go:build tools

// Package tools pins the helm program, which build.sh compiles: the chart is installed with it,
// as users install it.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
