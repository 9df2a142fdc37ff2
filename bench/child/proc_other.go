//go:build !linux

package child

import "syscall"

// procAttr is nil off Linux: a child that reads its stdin ends when it
// closes, which happens when the benchmark exits, however it exits.
func procAttr() *syscall.SysProcAttr { return nil }
