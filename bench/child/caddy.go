package child

import (
	"path/filepath"
	"syscall"
)

// Caddy is the Spec of the Caddy binary bin running the configuration
// file config (`caddy run --config config [--adapter adapter]`), stopped
// with SIGTERM. Its home, data and config directories are dir, so that it
// writes nothing into the user's: a benchmark's Caddy is its own.
func Caddy(name, bin, dir, config, adapter string) Spec {
	args := []string{"run", "--config", config}
	if adapter != "" {
		args = append(args, "--adapter", adapter)
	}
	dir, _ = filepath.Abs(dir)
	return Spec{
		Name:       name,
		Path:       bin,
		Args:       args,
		Env:        []string{"HOME=" + dir, "XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir},
		StopSignal: syscall.SIGTERM,
	}
}
