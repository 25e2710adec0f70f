//go:build tools

// Package tools pins the Kubernetes programs build.sh compiles from k8s.io/kubernetes itself:
// kube-apiserver, kube-controller-manager (service-account tokens, namespace deletion, garbage
// collection), kube-scheduler (binds pods to kwok's nodes) and kubectl. Nothing of their code is in
// this repository, only this module's requirements.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
