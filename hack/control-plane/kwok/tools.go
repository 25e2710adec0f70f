//go:build tools

// Package tools pins kwok (nodes and pods without a kubelet), which build.sh compiles.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
