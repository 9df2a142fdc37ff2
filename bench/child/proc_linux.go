package child

import "syscall"

// procAttr puts a child in its own process group, so that a terminal's
// Ctrl-C reaches only the benchmark, which stops its children in order,
// and has the kernel kill the child if the benchmark dies without
// stopping it (Pdeathsig fires when the thread that started the child
// exits; Go keeps its threads for the process's life unless a goroutine
// exits locked to one, which nothing here does).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
