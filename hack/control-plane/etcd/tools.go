//go:build tools

// Package tools pins etcd's server program, which build.sh compiles.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "go.etcd.io/etcd/etcdctl/v3"
)
