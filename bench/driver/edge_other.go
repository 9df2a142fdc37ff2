//go:build !linux

package driver

import "syscall"

// childProcAttr is nil off Linux: a child ends when its stdin closes,
// which happens when the benchmark exits, however it exits.
func childProcAttr() *syscall.SysProcAttr { return nil }
